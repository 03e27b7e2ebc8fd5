"""The usage report of board-api.md, and what the utilization report shares with it
(its scope, key fields, names and head: board.reports.utilization_stream renders it),
computed from hourly rollups only.

Figures are summed as integer microseconds and turned into hours (6 decimals) only at
the end, so a total is exactly the sum of its hours, whatever the grouping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from operator import itemgetter
from typing import Any

import orjson
import psycopg

from board.errors import Unprocessable
from board.pricing.cost import Currency, amount, exact, window_pricing, workspace_currency
from board.pricing.energy import (
    co2e_kg,
    energy_cost,
    energy_cost_text,
    energy_rates,
    kwh,
)
from board.reportkit.figures import hours as hours
from board.reportkit.figures import ratio as ratio
from board.reportkit.params import HOUR, Window
from board.reports import repository as repo
from board.reports.energy import ENERGY_FIGURES, NO_ENERGY, add_energy, energy_sums
from board.reports.schemas import (
    ReportCoverage,
    UsageHead,
    UsageTotals,
    UtilizationHead,
)

# Key fields each grouping puts on a row, and the SQL columns they come from.
KEY_FIELDS = {
    "user": ("user",),
    "team": ("team",),
    "host": ("hostId", "displayName"),
    "gpu": ("hostId", "displayName", "gpuUuid", "gpuIndex", "gpuName"),
    "day": ("day",),
    "month": ("month",),
}
KEY_COLUMNS = {
    "user": ("linux_user",),
    "team": ("team",),
    "host": ("host_id",),
    "gpu": ("host_id", "gpu_id"),
    "day": ("day",),
    "month": ("month",),
}
USAGE_FIGURES = ("heldGpuHours", "activeGpuHours", "idleHeldGpuHours", "idleHeldShare")
# Last on every usage row (after coveredGpuHours where there is one): board/pricing/cost.py.
COST_FIGURES = ("cost", "currency")
# ... and then its energy (board.reports.energy.ENERGY_FIGURES), and on rows keyed by
# user the time held outside any scheduler job of theirs (board.jobs; docs/jobs.md).
OUTSIDE_FIGURES = ("outsideJobGpuHours",)
UTILIZATION_FIGURES = (
    "bucketStart",
    "coveredHours",
    "activeHours",
    "idleHeldHours",
    "idleHours",
    "avgUtilPct",
    "avgMemoryUsedPct",
    "energyKWh",
    "idleEnergyKWh",
    "avgPowerW",
    "energyCoveredHours",
)


def energy_fields(
    sums: Sequence[int], currency: Currency | None, text: bool = False
) -> tuple[float | str | None, ...]:
    """A row's ENERGY_FIGURES from its exact sums (board.reports.energy.ENERGY_SUMS);
    `text`: the cost with exactly the currency's digits, as CSV cells show money."""
    covered, active, idle_held, idle, cost_n, co2e_n, unpriced, unrated = sums
    # Known only with energy measured and a rate in force all along it (checked first:
    # the usual row of a report without rates skips both calls).
    cost = co2e = None
    if covered and not unpriced:
        cost = (energy_cost_text if text else energy_cost)(cost_n, covered, unpriced, currency)
    if covered and not unrated:
        co2e = co2e_kg(co2e_n, covered, unrated)
    return (
        kwh(active + idle_held + idle),
        kwh(active),
        kwh(idle_held),
        hours(covered),
        cost,
        co2e,
    )


@dataclass
class UsageReport:
    """The usage report: its envelope typed, its rows as the JSON objects (keys in
    `columns` order, which the CSV header follows)."""

    head: UsageHead
    columns: tuple[str, ...]
    # Plain dicts, as they are sent: per GPU and day, 90 days of 1,000 GPUs is 90,000
    # rows, and a model per row would cost more than the query.
    rows: list[dict[str, Any]]
    totals: UsageTotals
    coverage: ReportCoverage

    def as_json(self) -> dict[str, Any]:
        """The body as a JSON object (schemas.UsageReportOut)."""
        body = self.head.model_dump()
        body["rows"] = self.rows
        body["totals"] = self.totals.model_dump()
        body["coverage"] = self.coverage.model_dump()
        return body

    def to_json(self) -> bytes:
        """The JSON body. orjson: the standard library took several times longer to
        encode a large report."""
        return orjson.dumps(self.as_json())


async def usage_scope(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    window: Window,
    day_keyed: bool,
    days: bool = True,
    rated: bool = True,
    month_keyed: bool = False,
    move_hours: bool = False,
) -> repo.Scope:
    """`rated`: with the window's electricity prices and carbon intensities.
    `month_keyed`: the UTC days whose hours start in two local months are read from
    their hours (a day row would give them all to one month), like dirty days.
    `move_hours`: a report keyed by local day or month whose sums drop the groups that
    net to zero (the usage reports' HAVING): there, where local days are not UTC days,
    the whole UTC days are read from their day rows all the same, and the hours that
    start on another local day (or month) than their day's noon are moved
    (repo.Scope.moved): ~1/24 of the rows per hour of offset, where every hour was read."""
    await repo.prepare(conn)
    movable = move_hours and days and (day_keyed or month_keyed)
    movable = movable and not window.days_are_utc_days()
    day_rows = day_keyed and not movable
    d0, d1 = window.whole_utc_days(day_rows) if days else (window.start, window.start)
    dirty = await repo.dirty_days(conn, workspace_id, d0, d1)
    moved: tuple[tuple[datetime, datetime], ...] = ()
    if movable:
        moved = window.hours_off_noon(d0, d1, set(dirty), by_month=not day_keyed)
    elif month_keyed:
        dirty = tuple(sorted({*dirty, *window.days_across_months(d0, d1)}))
    scope = repo.Scope(
        workspace_id, window.start, window.end, window.tz_name, d0, d1, dirty, moved=moved
    )
    if rated:
        scope = replace(scope, rates=await energy_rates(conn, workspace_id, window.end))
    return scope


@contextmanager
def zone_known_to_database(window: Window) -> Iterator[None]:
    """A zone Python knows but the server does not: a 422, not a 500."""
    try:
        yield
    except psycopg.errors.InvalidParameterValue:
        raise Unprocessable(f"tz {window.tz_name!r} is not known to the database.") from None


def month_text(first: date) -> str:
    """A month key as rows show it: the local month of its first day, `YYYY-MM`."""
    return first.isoformat()[:7]


def unique(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


async def report_coverage(
    conn: psycopg.AsyncConnection[Any],
    scope: repo.Scope,
    window: Window,
    covered_us: int | None = None,
) -> ReportCoverage:
    """`covered_us`: the window's covered total when the caller summed it already."""
    first, last, covered = await repo.coverage(conn, scope, with_total=covered_us is None)
    if covered_us is not None:
        covered = covered_us
    latest = None
    if last is not None:
        latest = min(last + HOUR, datetime.now(UTC))
    return ReportCoverage(
        earliest_data_at=window.local(first) if first is not None else None,
        latest_data_at=window.local(latest) if latest is not None else None,
        covered_gpu_hours=hours(covered),
    )


class _Names:
    """Key fields for host and GPU ids, looked up once per report."""

    def __init__(self, hosts: dict[int, repo.HostName], gpus: dict[int, repo.GpuName]) -> None:
        self.hosts = hosts
        self.gpus = gpus

    @classmethod
    async def load(
        cls,
        conn: psycopg.AsyncConnection[Any],
        workspace_id: int,
        host_ids: set[int],
        gpu_ids: set[int],
    ) -> _Names:
        return cls(
            await repo.host_names(conn, workspace_id, host_ids),
            await repo.gpu_names(conn, workspace_id, gpu_ids),
        )

    def host(self, host_id: int) -> tuple[str | None, str]:
        name = self.hosts.get(host_id)
        return (name.public_id, name.display_name) if name else (None, "(deleted host)")

    def gpu(self, gpu_id: int) -> tuple[str | None, int | None, str | None]:
        name = self.gpus.get(gpu_id)
        return (name.uuid, name.index, name.name) if name else (None, None, None)


def _key_builder(
    keys: Sequence[str], columns: Sequence[str], names: _Names
) -> tuple[Callable[[tuple[Any, ...]], tuple[Any, ...]], Callable[[tuple[Any, ...]], Any]]:
    """Functions from a SQL key tuple to the row's key fields, and to its sort key."""
    position = {c: i for i, c in enumerate(columns)}
    fields = unique([f for k in keys for f in KEY_FIELDS[k]])

    def values(key: tuple[Any, ...]) -> tuple[Any, ...]:
        out: dict[str, Any] = {}
        if "linux_user" in position:
            out["user"] = key[position["linux_user"]]
        if "team" in position:
            out["team"] = key[position["team"]]
        if "host_id" in position:
            out["hostId"], out["displayName"] = names.host(key[position["host_id"]])
        if "gpu_id" in position:
            out["gpuUuid"], out["gpuIndex"], out["gpuName"] = names.gpu(key[position["gpu_id"]])
        if "day" in position:
            out["day"] = key[position["day"]].isoformat()
        if "month" in position:
            out["month"] = month_text(key[position["month"]])
        return tuple(out[f] for f in fields)

    field_at = {f: i for i, f in enumerate(fields)}

    def order(row: tuple[Any, ...]) -> tuple[Any, ...]:
        parts: list[Any] = []
        for k in keys:
            if k == "user":
                parts.append(row[field_at["user"]])
            elif k == "team":
                # Users without a team last (SQL: NULLS LAST).
                team = row[field_at["team"]]
                parts += [team is None, team or ""]
            elif k in ("day", "month"):
                parts.append(row[field_at[k]])
            else:
                parts += [row[field_at["displayName"]], str(row[field_at["hostId"]])]
                if k == "gpu":
                    parts += [row[field_at["gpuIndex"]] or 0, str(row[field_at["gpuUuid"]])]
        return tuple(parts)

    return values, order


async def usage_report(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    window: Window,
    keys: tuple[str, ...],
) -> UsageReport:
    """GPU-hours held per Linux user, team, host, GPU, day or month (or a pair), split
    active/idle-held."""
    scope = await usage_scope(
        conn,
        workspace_id,
        window,
        day_keyed="day" in keys,
        month_keyed="month" in keys,
        move_hours=True,
    )
    columns = unique([c for k in keys for c in KEY_COLUMNS[k]])
    with_covered = not {"user", "team"} & set(keys)
    currency = await workspace_currency(conn, workspace_id)
    pricing = await window_pricing(conn, workspace_id, window.start, window.end)
    # held, active, idle-held µs, covered µs, exact cost numerator; and the energy sums
    # (the users' share, or with covered time the GPUs' own).
    figures: dict[tuple[Any, ...], tuple[list[int], Sequence[int]]] = {}
    width = len(columns)
    with zone_known_to_database(window):
        for found in await repo.held_by(conn, scope, columns, pricing, energy=not with_covered):
            time = [*found[width : width + 3], 0, exact(found[width + 3])]
            figures[found[:width]] = (
                time,
                NO_ENERGY if with_covered else energy_sums(found[width + 4 :]),
            )
        if with_covered:
            # GPUs nobody held still show, with their covered time: not silently missing.
            for found in await repo.covered_by(conn, scope, columns):
                time = figures.get(found[:width], ([0, 0, 0, 0, 0], NO_ENERGY))[0]
                time[3] = found[width]
                figures[found[:width]] = (time, energy_sums(found[width + 1 :]))
        coverage = await report_coverage(conn, scope, window)
        with_outside = "user" in keys
        outside = await repo.outside_by(conn, scope, columns) if with_outside else {}

    host_ids = {k[columns.index("host_id")] for k in figures} if "host_id" in columns else set()
    gpu_ids = {k[columns.index("gpu_id")] for k in figures} if "gpu_id" in columns else set()
    names = await _Names.load(conn, workspace_id, host_ids, gpu_ids)
    values, order = _key_builder(keys, columns, names)

    ordered: list[tuple[Any, ...]] = []
    code = currency.code if currency else None
    energy_total = list(NO_ENERGY)
    for key, ((held, active, idle_held, covered, cost), energy) in figures.items():
        row = values(key) + (hours(held), hours(active), hours(idle_held), ratio(idle_held, held))
        if with_covered:
            row += (hours(covered),)
        add_energy(energy_total, energy)
        row += (amount(cost, currency), code, *energy_fields(energy, currency))
        if with_outside:
            row += (hours(outside.get(key, 0)),)
        ordered.append(row)
    ordered.sort(key=order)

    sums = [f[0] for f in figures.values()]
    held_total = sum(f[0] for f in sums)
    idle_total = sum(f[2] for f in sums)
    totals = usage_totals(
        (held_total, sum(f[1] for f in sums), idle_total, sum(f[4] for f in sums)),
        energy_total,
        currency,
    )
    head = usage_head(window, keys)
    key_fields = unique([f for k in keys for f in KEY_FIELDS[k]])
    columns = (
        key_fields
        + USAGE_FIGURES
        + (("coveredGpuHours",) if with_covered else ())
        + COST_FIGURES
        + ENERGY_FIGURES
        + (OUTSIDE_FIGURES if with_outside else ())
    )
    rows = [dict(zip(columns, row, strict=True)) for row in ordered]
    return UsageReport(head, columns, rows, totals, coverage)


def usage_totals(
    held: Sequence[int], energy: Sequence[int], currency: Currency | None
) -> UsageTotals:
    """The totals from the exact sums of every row: held, active, idle-held µs and the
    cost numerator; the energy sums (ENERGY_SUMS). Each rounded once."""
    held_us, active_us, idle_held_us, cost = held
    kwh_all, kwh_active, kwh_idle_held, covered, energy_cost_value, co2e = energy_fields(
        energy, currency
    )
    return UsageTotals(
        held_gpu_hours=hours(held_us),
        active_gpu_hours=hours(active_us),
        idle_held_gpu_hours=hours(idle_held_us),
        idle_held_share=ratio(idle_held_us, held_us),
        cost=amount(cost, currency),
        currency=currency.code if currency else None,
        energy_kwh=kwh_all,
        active_energy_kwh=kwh_active,
        idle_held_energy_kwh=kwh_idle_held,
        energy_covered_hours=covered,
        energy_cost=energy_cost_value,
        co2e_kg=co2e,
    )


def usage_head(window: Window, keys: tuple[str, ...]) -> UsageHead:
    return UsageHead(
        from_=window.local(window.start),
        to=window.local(window.end),
        group_by=",".join(keys),
        tz=window.tz_name,
        hour_alignment=window.hour_alignment(),
    )


async def utilization_scope(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    window: Window,
    bucket: str,
    host_id: int | None = None,
) -> repo.Scope:
    # Hourly buckets need hour rows; daily ones may read whole UTC days. No prices: the
    # utilization report shows energy, never its cost.
    scope = await usage_scope(
        conn, workspace_id, window, day_keyed=True, days=bucket == "day", rated=False
    )
    return replace(scope, host_id=host_id)


async def ordered_keys(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, group: str, ids: set[int]
) -> list[tuple[int, dict[str, Any]]]:
    """Each GPU's (or host's) id and key fields, in name order (a plain dict: they are
    the front of every row of the block)."""
    gpus = await repo.gpu_names(conn, workspace_id, ids) if group == "gpu" else {}
    host_ids = {g.host_id for g in gpus.values()} if group == "gpu" else ids
    names = _Names(await repo.host_names(conn, workspace_id, host_ids), gpus)
    values, order = _key_builder((group,), KEY_COLUMNS[group], names)
    keyed = []
    for key in ids:
        if group == "gpu":
            gpu = gpus.get(key)
            fields = values((gpu.host_id if gpu else -1, key))
        else:
            fields = values((key,))
        keyed.append((order(fields), key, dict(zip(KEY_FIELDS[group], fields, strict=True))))
    keyed.sort(key=itemgetter(0))
    return [(key, fields) for _, key, fields in keyed]


def utilization_head(window: Window, group: str, bucket: str) -> UtilizationHead:
    return UtilizationHead(
        from_=window.local(window.start),
        to=window.local(window.end),
        group_by=group,
        bucket=bucket,
        tz=window.tz_name,
        hour_alignment=window.hour_alignment(),
    )
