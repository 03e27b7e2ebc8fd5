"""The jobs report (docs/jobs.md "The jobs report"): per run, Linux user, account,
partition or local day, how the GPUs the scheduler allocated were spent in a window.

Figures are summed as integer microseconds (job_hours, credited per job, GPU and
UTC hour; job_day_figures, their sums per UTC day, for the clean whole UTC days of the
window: board.jobs.days) and turned into hours only at the end, with the usage report's
rounding (board.reportkit.figures), so a total is exactly the sum of its microseconds. Allocated
time is read from the allocations themselves, clipped to the window and to now.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg

from board.errors import Unprocessable
from board.jobs import report_sql
from board.jobs.days import dirty_job_days, hour_ranges
from board.jobs.report_schemas import JobsFigures, JobsReportHead
from board.jobs.schemas import MAX_TEXT
from board.reportkit.csv import LINE_END, csv_cells
from board.reportkit.figures import hours, ratio
from board.reportkit.params import Window, parse_choice

GROUPS = ("job", "user", "account", "partition", "day")
SORTS = tuple(report_sql.SORTS)
# Rows sent at most: the first in sort order (the most wasted jobs by default).
ROW_LIMIT = 5_000
FILTER_MAX = 64
# Hour ranges are probed by the index while they are at most 1/RANGED_SHARE of the window.
RANGED_SHARE = 4

KEY_FIELDS = {
    "job": (
        "cluster",
        "jobId",
        "publicId",
        "user",
        "account",
        "partition",
        "name",
        "state",
        "startedAt",
        "endedAt",
    ),
    "user": ("user",),
    "account": ("account", "team"),
    "partition": ("partition",),
    "day": ("day",),
}
FIGURE_FIELDS = tuple(field.alias or name for name, field in JobsFigures.model_fields.items())


@dataclass(frozen=True)
class JobsQuery:
    window: Window
    group: str
    sort: str
    user: str | None
    account: str | None


def _filter(label: str, value: str | None, longest: int = FILTER_MAX) -> str | None:
    if value is None or value.strip() == "":
        return None
    if len(value) > longest or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise Unprocessable(
            f"{label} must be a name of at most {longest} characters, without control characters."
        )
    return value.strip()


def parse_query(
    window: Window, group_by: str | None, sort: str | None, user: str | None, account: str | None
) -> JobsQuery:
    """The report's choices, checked: 422 says why."""
    group = parse_choice("groupBy", group_by, GROUPS, "job")
    chosen = parse_choice("sort", sort, SORTS, "wasted" if group == "job" else "key")
    # A record's account may be as long as its other names (schemas.MAX_TEXT): each is
    # one a filter can name.
    account_filter = _filter("account", account, MAX_TEXT)
    return JobsQuery(window, group, chosen, _filter("user", user), account_filter)


@dataclass
class JobsReport:
    """The report: its head typed, its rows as the JSON objects (keys in `columns`)."""

    head: JobsReportHead
    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    totals: JobsFigures

    def as_json(self) -> dict[str, Any]:
        body = self.head.model_dump()
        body["rows"] = self.rows
        body["totals"] = self.totals.model_dump()
        return body

    def to_json(self) -> bytes:
        return orjson.dumps(self.as_json())

    def to_csv(self) -> str:
        """One line per row, the JSON rows' fields in their order; text cells
        formula-safe (board/reportkit/csv.py). The totals are the JSON's only."""
        lines = [csv_cells(self.columns)]
        lines += [csv_cells(row[c] for c in self.columns) for row in self.rows]
        return LINE_END.join(lines) + LINE_END


def figures(sums: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row's figures (FIGURE_FIELDS) from its exact sums (report_sql.FIGURE_COLUMNS)."""
    memory = sums[-1]
    allocated, covered, active, idle_held, foreign, unused, util = (int(v or 0) for v in sums[:-1])
    return (
        hours(allocated),
        hours(covered),
        hours(active),
        hours(idle_held),
        hours(foreign),
        hours(unused),
        hours(idle_held + unused),
        ratio(active, covered),
        ratio(util, covered),
        None if memory is None else int(memory),
    )


def _days(window: Window) -> tuple[list[Any], list[datetime], list[datetime]]:
    """The window's local days (the hour-start rule: params.Window) and each one's
    [lo, hi) inside the window."""
    days, lows, highs = [], [], []
    day, last = window.day_of(window.start), window.last_day()
    while day <= last:
        following = day + timedelta(days=1)
        days.append(day)
        lows.append(max(window.day_start(day), window.start))
        highs.append(min(window.day_start(following), window.end))
        day = following
    return days, lows, highs


def _key_values(group: str, window: Window, row: tuple[Any, ...]) -> tuple[Any, ...]:
    if group == "job":
        _, public_id, cluster, job_id, user, account, partition, name, state, start, end = row
        return (
            cluster,
            job_id,
            public_id,
            user,
            account,
            partition,
            name,
            state,
            window.local(start).isoformat(),
            window.local(end).isoformat() if end is not None else None,
        )
    if group == "day":
        return (row[0].isoformat(),)
    return tuple(row)


async def jobs_report(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    query: JobsQuery,
    now: datetime | None = None,
    row_limit: int = ROW_LIMIT,
    *,
    day_rows: bool = True,
) -> JobsReport:
    """`day_rows` False: every figure from the hour rows (what the day rows must equal)."""
    window = query.window
    # Day rows serve the whole UTC days of the window, but for rows per local day only
    # where a local day is a UTC day; stale (dirty) days are read from their hours.
    d0 = d1 = window.start
    if day_rows:
        d0, d1 = window.whole_utc_days(day_keyed=query.group == "day")
    dirty = await dirty_job_days(conn, workspace_id, d0, d1)
    ranges = hour_ranges(window.start, window.end, d0, d1, dirty)
    until = min(window.end, (now or datetime.now(UTC)).astimezone(UTC))
    values: dict[str, Any] = {
        "ws": workspace_id,
        "start": window.start,
        "end": window.end,
        "until": max(until, window.start),
        "tz": window.tz_name,
        "user": query.user,
        "account": query.account,
        "limit": row_limit,
        "d0": d0,
        "d1": d1,
        "dirty": list(dirty),
        "lo": [r[0] for r in ranges],
        "hi": [r[1] for r in ranges],
    }
    filtered = query.user is not None or query.account is not None
    # Few hours to read (the edges, a few dirty days): each range by the index; many:
    # the window's hours read through.
    ranged = sum((hi - lo for lo, hi in ranges), timedelta(0)) * RANGED_SHARE <= (
        window.end - window.start
    )
    if query.group == "day":
        values["days"], values["day_lo"], values["day_hi"] = _days(window)
        statement = report_sql.day_sql(query.sort, filtered, ranged)
    else:
        statement = report_sql.keyed_sql(query.group, query.sort, filtered, ranged)
    # No JIT: these short aggregates cost less to run than to compile. Memory to hash a
    # month of a large cluster's runs (~50,000 groups) rather than sort 1.5 million figure
    # rows on disk: 1.2 s -> see docs/benchmarks.md.
    await conn.execute("SET LOCAL jit = off")
    await conn.execute("SET LOCAL work_mem = '64MB'")
    try:
        cur = await conn.execute(statement, values)
    except psycopg.errors.InvalidParameterValue:
        raise Unprocessable(f"tz {window.tz_name!r} is not known to the database.") from None
    found = await cur.fetchall()

    width = report_sql.KEY_WIDTH[query.group]
    sums = len(report_sql.FIGURE_COLUMNS)
    rows = []
    for row in found:
        fields = _key_values(query.group, window, row[:width])
        rows.append(fields + figures(row[width : width + sums]))
    totals_row: tuple[Any, ...] = (0, 0, 0, 0, 0, 0, 0, None)
    row_count = 0
    if found:
        row_count = int(found[0][width + sums])
        totals_row = tuple(found[0][width + sums + 1 :])
    columns = KEY_FIELDS[query.group] + FIGURE_FIELDS
    head = JobsReportHead(
        from_=window.local(window.start),
        to=window.local(window.end),
        group_by=query.group,
        tz=window.tz_name,
        hour_alignment=window.hour_alignment(),
        sort=query.sort,
        user=query.user,
        account=query.account,
        row_limit=row_limit,
        row_count=row_count,
        truncated=row_count > len(found),
    )
    totals = JobsFigures.model_validate(dict(zip(FIGURE_FIELDS, figures(totals_row), strict=True)))
    return JobsReport(head, columns, [dict(zip(columns, r, strict=True)) for r in rows], totals)
