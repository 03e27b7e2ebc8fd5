"""A usage row's figures as the text of its CSV line, straight from the exact integers.

The same text the CSV writer gives the rounded figures (board.reportkit.csv.cell: six
fixed decimals; money with the currency's digits), without a float and a cell() call per
figure: a 90,000-row CSV body spends most of its Python time on its figures.
"""

from __future__ import annotations

from collections.abc import Sequence

from board.pricing.cost import Currency
from board.pricing.energy import co2e_mg, energy_cost_text


def millionths(q: int) -> str:
    """A non-negative number of millionths with its six decimals ("1.500000")."""
    return f"{q // 1_000_000}.{q % 1_000_000:06d}"


def hours_text(us: int) -> str:
    """service.hours(us) as the CSV writes it (half up to the millionth of an hour)."""
    return millionths((us + 1_800) // 3_600)


def ratio_text(part: int, whole: int) -> str:
    """service.ratio(part, whole) as the CSV writes it; "" for null."""
    return "" if whole == 0 else millionths(round(1e6 * part / whole))


def _kwh_text(uws: int) -> str:
    # board.pricing.energy.kwh: half up to the millionth of a kWh (3.6 J).
    return millionths((uws + 1_800_000) // 3_600_000)


def energy_texts(sums: Sequence[int], currency: Currency | None) -> tuple[str, ...]:
    """service.energy_fields(sums, currency, text=True) as the CSV writes them."""
    covered, active, idle_held, idle, cost_n, co2e_n, unpriced, unrated = sums
    cost = co2e = ""
    if covered and not unpriced:
        cost = energy_cost_text(cost_n, covered, unpriced, currency) or ""
    if covered and not unrated:
        co2e = millionths(co2e_mg(co2e_n))
    return (
        _kwh_text(active + idle_held + idle),
        _kwh_text(active),
        _kwh_text(idle_held),
        hours_text(covered),
        cost,
        co2e,
    )
