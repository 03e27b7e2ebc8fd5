"""Energy in the usage reports (docs/accounting.md, "Energy and carbon"): which energy a
row shows, and its sums as SQL and as exact integers.

A row keyed by a Linux user or team shows the users' share, split like held time (their
held time with a power reading, and its energy by state; never idle energy: nobody
holds an idle GPU). A row keyed by GPU, host or day alone shows the GPUs' own energy in
every state, measured over their energy-covered time. Cost and CO2e are priced per
rollup row by board.pricing.energy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from board.pricing.energy import rated_parts, rated_sums_sql, segment_sql

# The fields a usage row (and the totals) adds, last, in this order.
ENERGY_FIGURES = (
    "energyKWh",
    "activeEnergyKWh",
    "idleHeldEnergyKWh",
    "energyCoveredHours",
    "energyCost",
    "co2eKg",
)
# The exact sums behind them, in energy_sums_sql's order: energy-covered µs; active,
# idle-held and idle µJ; Σ µJ × price and Σ µJ × grams (× 10^6); µs without a price, and
# without an intensity, in force.
ENERGY_SUMS = (
    "covered_us",
    "active_uws",
    "idle_held_uws",
    "idle_uws",
    "cost_n",
    "co2e_n",
    "unpriced_us",
    "unrated_us",
)
NO_ENERGY: tuple[int, ...] = (0,) * len(ENERGY_SUMS)
# Their names as columns of a query.
ENERGY_COLUMNS = tuple(f"e_{name}" for name in ENERGY_SUMS)


def energy_aggregates(source: str, rated: bool) -> list[str]:
    """A report row's energy aggregates, in ENERGY_SUMS order. `source` "user": the
    users' share, from repository.user_source (its `e_seg` the rate segment); "gpu": the
    GPUs' own, from repository.gpu_energy_source. `rated`: some price or intensity is in force
    (else the rated four are NULL). Not cast to bigint: a long window's µJ may pass 2^63."""
    if source == "user":
        sums = [
            "sum(energy_held_us)::bigint",
            "sum(active_energy_uws)",
            "sum(idle_held_energy_uws)",
            "0",
        ]
        energy = "active_energy_uws + idle_held_energy_uws"
        covered, segment = "energy_held_us", "e_seg"
    else:
        sums = [
            "sum(energy_covered_us)::bigint",
            "sum(active_energy_uws)",
            "sum(idle_held_energy_uws)",
            "sum(idle_energy_uws)",
        ]
        energy = "active_energy_uws + idle_held_energy_uws + idle_energy_uws"
        covered, segment = "energy_covered_us", segment_sql("t")
    # Nothing in force: the four rated sums are left out (energy_sums reads them as null).
    return sums + rated_sums_sql(energy, covered, segment) if rated else sums


def energy_sums_sql(source: str, rated: bool) -> str:
    """energy_aggregates as a select list."""
    return ", ".join(energy_aggregates(source, rated))


def named_energy_sql(source: str, rated: bool) -> str:
    """energy_aggregates named `e_<ENERGY_SUMS name>` (ENERGY_COLUMNS)."""
    return ", ".join(
        f"{sql} AS {name}"
        for sql, name in zip(energy_aggregates(source, rated), ENERGY_COLUMNS, strict=False)
    )


def energy_columns(rated: bool) -> tuple[str, ...]:
    """The names named_energy_sql gives, in order."""
    return ENERGY_COLUMNS if rated else ENERGY_COLUMNS[:4]


def energy_sums(values: Sequence[Any]) -> tuple[int, ...]:
    """The aggregates of energy_sums_sql as exact integers (ENERGY_SUMS); the first four
    are never NULL (a query that may leave them so coalesces them), the rated four are
    absent or NULL when nothing was in force."""
    covered, active, idle_held, idle = values[:4]
    if len(values) == 4 or values[6] is None:
        # Nothing in force: no cost, no CO2e (the hot path of a report of many rows).
        return (covered, int(active), int(idle_held), int(idle), 0, 0, covered, covered)
    rated = rated_parts(values[4:8], covered)
    return (covered, int(active), int(idle_held), int(idle), *rated)


def add_energy(total: list[int], sums: Sequence[int]) -> None:
    for i, value in enumerate(sums):
        total[i] += value


def summed(total: Sequence[int], rows: Sequence[Sequence[int]]) -> list[int]:
    """`total` plus every row of energy sums, column by column (a batch at once: one C
    loop per column rather than a Python call per row)."""
    return [sum(column) for column in zip(total, *rows, strict=True)]
