"""The report SQL: rollup tables only (plus hosts and gpus for names), one workspace each.

Every statement is scoped by workspace_id and the window, which the (workspace_id,
hour_start) and (workspace_id, day_start) indexes serve. Key expressions come from the
fixed table below, never from the request, so building the GROUP BY list is safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from board.pricing.cost import Pricing
from board.pricing.energy import NO_RATES, EnergyRates, segment_sql
from board.reportkit.params import HOUR
from board.reports.energy import energy_sums_sql

# The SQL behind each grouping column; `day` is the local date a bucket starts on,
# `month` the first day of that date's local month.
_EXPRESSIONS = {
    "linux_user": "linux_user",
    "team": "team",
    "host_id": "host_id",
    "gpu_id": "gpu_id",
    "day": "(t AT TIME ZONE %(tz)s)::date",
    "month": "date_trunc('month', t AT TIME ZONE %(tz)s)::date",
    "hour": "t",
}

# The columns each rollup source offers, as its rows name them (`t`: the day's or the
# hour's start).
USER_COLUMNS = (
    "gpu_id",
    "host_id",
    "linux_user",
    "t",
    "held_us",
    "active_us",
    "idle_held_us",
    "energy_held_us",
    "active_energy_uws",
    "idle_held_energy_uws",
)
GPU_COLUMNS = (
    "gpu_id",
    "host_id",
    "t",
    "covered_us",
    "active_us",
    "idle_held_us",
    "idle_us",
    "util_pct_us",
    "memory_used_mb_us",
    "memory_total_mb_us",
    "energy_covered_us",
    "active_energy_uws",
    "idle_held_energy_uws",
    "idle_energy_uws",
)
_USER_TIMES = ("held_us", "active_us", "idle_held_us")
_USER_ENERGY = ("energy_held_us", "active_energy_uws", "idle_held_energy_uws")
_GPU_ENERGY = ("energy_covered_us", "active_energy_uws", "idle_held_energy_uws", "idle_energy_uws")
# Report keys (select_columns) that are rollup columns themselves.
_KEYED = ("gpu_id", "host_id", "linux_user")


# The rollup columns that are figures (sums), not keys: what a moved hour negates.
_FIGURE_COLUMNS = frozenset(USER_COLUMNS + GPU_COLUMNS) - {*_KEYED, "t"}
# Where a moved hour stands: itself (sign 1), and negated as part of its day row (the
# UTC day's noon, where rollup_rows(moved=True) stands the day rows).
_MOVED_AT = (
    "CASE WHEN m.sign = 1 THEN hour_start "
    "ELSE date_trunc('day', hour_start, 'UTC') + interval '12 hours' END"
)


def rollup_rows(
    source: str, names: Sequence[str], day_table: str | None = None, moved: bool = False
) -> str:
    """A window's rows of the `source` ("user" or "gpu") rollups as `r`: clean whole UTC
    days in [d0, d1) from the day table; everything else in the window (the hours around
    them, and dirty days) from the hour table.

    `names`: what each row carries: columns (`t`: the row's start), or expressions, where
    `{start}` stands for the start column (`day_start` or `hour_start`). PostgreSQL reads
    such a union straight into the sums above it only when the sums read every column it
    carries, in its order; otherwise each row takes one more pass (~15 % of a usage
    report, benchmarks.md, "Reports' unions"). Callers list what they read, as they read it.
    `day_table`: another table of the same day rows (user_day_totals, gpu_day_totals:
    summed over GPUs, for rows that need no GPU or host).

    `moved` (Scope.moved): a day row stands at its UTC day's noon (`t`), so it counts on
    the local day (or month) of its noon; its hours that start on another one are read
    again, once as themselves and once negated at the noon: the sums per local day are
    exactly their hours' (for callers whose sums drop what nets to zero).

    Hours are named one by one (Scope.params' `hours`, `moved`; rollups start on whole
    UTC hours), so PostgreSQL knows how many rows they are. Joined to a list of [lo, hi)
    ranges instead, it guessed each range at a ninth of every hour kept and read them
    all: ~0.5 s at 200 GPUs for a month's two edge hours, growing with the history
    (benchmarks.md, "2,000 GPUs x 400 days")."""

    def branch(start: str, sign: str = "") -> str:
        return ", ".join(
            f"{start} AS t"
            if n == "t"
            else f"{sign} * {n} AS {n}"
            if sign and n in _FIGURE_COLUMNS
            else n.replace("{start}", start)
            for n in names
        )

    day_start = "day_start + interval '12 hours'" if moved else "day_start"
    moved_hours = (
        f"""
     UNION ALL
     SELECT {branch(_MOVED_AT, "m.sign")}
     FROM {source}_hour_rollups CROSS JOIN (VALUES (1), (-1)) AS m(sign)
     WHERE workspace_id = %(ws)s AND hour_start = ANY(%(moved)s::timestamptz[])"""
        if moved
        else ""
    )
    return f"""
    (SELECT {branch(day_start)}
     FROM {day_table or f"{source}_day_rollups"}
     WHERE workspace_id = %(ws)s AND day_start >= %(d0)s AND day_start < %(d1)s
       AND NOT day_start = ANY(%(dirty)s::timestamptz[])
     UNION ALL
     SELECT {branch("hour_start")}
     FROM {source}_hour_rollups
     WHERE workspace_id = %(ws)s AND hour_start = ANY(%(hours)s::timestamptz[]){moved_hours}
    ) AS r
"""


def _wanted(offered: Sequence[str], needed: set[str]) -> tuple[str, ...]:
    return tuple(c for c in offered if c in needed)


def _keyed(columns: Sequence[str]) -> list[str]:
    """The rollup columns report keys read, in the keys' order: their own, `t` for a day
    or an hour, the Linux user for a team."""
    found: list[str] = []
    for column in columns:
        read = "t" if column in ("day", "month", "hour") else column
        read = "linux_user" if column == "team" else read
        if read not in found:
            found.append(read)
    return found


def gpu_source(
    columns: Sequence[str], figures: Sequence[str], rated: bool = False, moved: bool = False
) -> str:
    """GPU rollup rows with what the key `columns` (select_columns' names) read, then
    `figures`, then the start when `rated` (its electricity rate segment); `moved`:
    rollup_rows'."""
    names = _keyed(columns)
    names += [f for f in figures if f not in names]
    if rated and "t" not in names:
        names.append("t")
    # Without a GPU or host key, a clean day's rows are the GPUs' totals (one a day).
    per_gpu = bool({"gpu_id", "host_id"} & set(names))
    return rollup_rows("gpu", names, None if per_gpu else "gpu_day_totals", moved)


def gpu_energy_source(columns: Sequence[str], rated: bool, moved: bool = False) -> str:
    """gpu_source with covered time and the GPUs' energy, as energy_sums_sql "gpu" and a
    covered sum before it read them."""
    return gpu_source(columns, ("covered_us", *_GPU_ENERGY), rated, moved)


# Each price holds from its start until the next start of its model; all the starts of a
# workspace's prices cut time into segments (width_bucket numbers them: 0 before the
# first start) inside which every GPU model has one price: MODEL_PRICES, the model's own
# price per segment, STAR_PRICES the "*" price (models without their own, and rollups
# of GPUs whose host was deleted).
_PRICE_SEGMENTS = """
    bounds AS (
        SELECT array_agg(DISTINCT starts_at ORDER BY starts_at) AS starts
        FROM prices WHERE workspace_id = %(ws)s
    ),
    segments AS (
        SELECT i AS seg,
               CASE WHEN i = 0 THEN '-infinity'::timestamptz
                    ELSE (SELECT starts FROM bounds)[i] END AS lo
        FROM generate_series(0, coalesce(array_length((SELECT starts FROM bounds), 1), 0)) AS i
    ),
    model_prices AS (
        SELECT p.gpu_model, s.seg, p.per_gpu_hour AS price
        FROM segments s
        JOIN price_ranges p ON p.workspace_id = %(ws)s AND p.gpu_model <> '*'
             AND s.lo >= p.starts_at AND s.lo < p.ends_at
    ),
    star_prices AS (
        SELECT s.seg, p.per_gpu_hour AS price
        FROM segments s
        JOIN price_ranges p ON p.workspace_id = %(ws)s AND p.gpu_model = '*'
             AND s.lo >= p.starts_at AND s.lo < p.ends_at
    )"""


def _energy_segment(rated: bool, at: str) -> str:
    return segment_sql(at) if rated else "NULL::int"


def user_source(
    columns: Sequence[str],
    pricing: Pricing,
    rated: bool = False,
    energy: bool = True,
    moved: bool = False,
) -> str:
    """The per-user rows a usage report sums: user rollup rows with `team` and `cost_n` (the
    cost numerator, µs × price). Costed (costed_user_source) when a price is in force in
    the window; else the plain rows with no cost (the report's cost is then 0, or null
    without a currency, exactly as the costed rows would give) and the directory joined
    only for a `team` column: no price segments, GPU models or regrouping to pay for.
    Each row has its energy, and `e_seg`, its electricity rate segment, when `rated`
    (board.pricing.energy; energy_sums_sql sums them). Unpriced rows carry no `team`
    unless `columns` has it, and no energy when `energy` is False (a report that shows
    the GPUs' energy, not the users'). `moved`: rollup_rows'."""
    if pricing.in_force:
        return costed_user_source(
            columns,
            pricing.by_model,
            teams="team" in columns,
            renamed=pricing.renamed,
            rated=rated,
            moved=moved,
        )
    # In the order the usage sums read them (keys, times, cost, energy, rate segment).
    names = [*_keyed(columns), *_USER_TIMES, "NULL::numeric AS cost_n"]
    if energy:
        names += _USER_ENERGY
        if rated:
            names.append(f"{segment_sql('{start}')} AS e_seg")
    # Without a GPU or host key, a clean day's rows are the users' totals over GPUs.
    per_gpu = bool({"gpu_id", "host_id"} & set(names))
    rows = rollup_rows("user", names, None if per_gpu else "user_day_totals", moved)
    if "team" not in columns:
        return rows
    return f"""
    (SELECT r.*, d.team
     FROM {rows}
     LEFT JOIN directory_entries d ON d.workspace_id = %(ws)s AND d.linux_user = r.linux_user
    ) AS r
"""


def costed_user_source(
    columns: Sequence[str] = (),
    by_model: bool = True,
    teams: bool = True,
    renamed: bool = False,
    rated: bool = False,
    moved: bool = False,
) -> str:
    """User rollup rows with each Linux user's team (the directory as it is now), the GPU's
    model and the exact cost numerators, held and idle-held: µs × the price per GPU-hour
    in force (board/pricing/cost.py rounds them; docs/money.md).

    Rows are first summed per Linux user, GPU model and price segment, and per the
    report's `columns` among gpu_id, host_id and day or month (as `t`, the local day's
    or month's first instant); the others are null. Summing before pricing keeps the
    price joins to a few rows, and is exact: within a segment a model's price does not change.
    The rows are summed per start (`per_start`) before the local day or month and the
    segments are found: a year's day rows are millions at 2,000 GPUs, their starts a few
    hundred, and the zone's date_trunc per row took ~0.5 µs each.

    Usage reports leave out what they do not show (user_source): `teams` False, `team`
    is null (no directory join); `by_model` False, when only `*` prices are in force in
    the window, every row costs the `*` price and `gpu_model` is null (no join of each
    rollup row to its GPU). Energy is summed like time, and per electricity rate
    segment too when `rated`. `moved`: rollup_rows'."""
    gpu = "r.gpu_id" if "gpu_id" in columns else "NULL::bigint"
    host = "r.host_id" if "host_id" in columns else "NULL::bigint"
    time = "NULL::timestamptz"
    if "day" in columns or "month" in columns:
        time = f"date_trunc('{'day' if 'day' in columns else 'month'}', p.t, %(tz)s)"
    # The model an hour was reported as: the GPU's name then (gpu_name_history, joined
    # only when a GPU of the workspace was ever `renamed`), else its name now.
    model = ("coalesce(n.name, g.name)" if renamed else "g.name") if by_model else "NULL::text"
    models = "LEFT JOIN gpus g ON g.workspace_id = %(ws)s AND g.id = r.gpu_id" if by_model else ""
    if by_model and renamed:
        models += """
        LEFT JOIN gpu_name_history n ON n.workspace_id = %(ws)s AND n.gpu_id = r.gpu_id
                                    AND r.t >= n.since AND r.t < n.until"""
    price = "coalesce(mp.price, sp.price)" if by_model else "sp.price"
    model_prices = (
        "LEFT JOIN model_prices mp ON mp.gpu_model = u.gpu_model AND mp.seg = u.seg"
        if by_model
        else ""
    )
    team = "d.team" if teams else "NULL::text"
    needed = {"linux_user", "t", *_USER_TIMES, *_USER_ENERGY}
    needed |= {c for c in ("gpu_id", "host_id") if c in columns}
    if by_model:
        needed.add("gpu_id")
    rows = rollup_rows("user", _wanted(USER_COLUMNS, needed), moved=moved)
    directory = (
        "LEFT JOIN directory_entries d ON d.workspace_id = %(ws)s AND d.linux_user = u.linux_user"
        if teams
        else ""
    )
    return f"""
    (WITH {_PRICE_SEGMENTS},
    per_start AS (
        SELECT {gpu} AS gpu_id, {host} AS host_id, r.linux_user, r.t, {model} AS gpu_model,
               sum(r.held_us) AS held_us, sum(r.active_us) AS active_us,
               sum(r.idle_held_us) AS idle_held_us, sum(r.energy_held_us) AS energy_held_us,
               sum(r.active_energy_uws) AS active_energy_uws,
               sum(r.idle_held_energy_uws) AS idle_held_energy_uws
        FROM {rows}
        {models}
        GROUP BY 1, 2, 3, 4, 5
    ),
    summed AS (
        SELECT p.gpu_id, p.host_id, p.linux_user, {time} AS t, p.gpu_model,
               width_bucket(p.t, (SELECT starts FROM bounds)) AS seg,
               {_energy_segment(rated, "p.t")} AS e_seg,
               sum(p.held_us)::bigint AS held_us, sum(p.active_us)::bigint AS active_us,
               sum(p.idle_held_us)::bigint AS idle_held_us,
               sum(p.energy_held_us) AS energy_held_us,
               sum(p.active_energy_uws) AS active_energy_uws,
               sum(p.idle_held_energy_uws) AS idle_held_energy_uws
        FROM per_start p
        GROUP BY 1, 2, 3, 4, 5, 6, 7
    )
    SELECT u.gpu_id, u.host_id, u.linux_user, u.t, u.held_us, u.active_us, u.idle_held_us,
           {team} AS team, u.gpu_model,
           u.held_us * {price} AS cost_n,
           u.idle_held_us * {price} AS idle_cost_n,
           u.energy_held_us, u.active_energy_uws, u.idle_held_energy_uws, u.e_seg
    FROM summed u
    {directory}
    {model_prices}
    LEFT JOIN star_prices sp ON sp.seg = u.seg) AS r
"""


@dataclass(frozen=True)
class Scope:
    """A workspace, the UTC-hour window [start, end), the zone days are cut in, the whole
    UTC days [d0, d1) that day rows may serve, and the days among them whose day rows are
    stale (dirty): read from their hours instead. `host_id` narrows the utilization rows
    to one host (a host page). `moved`: [lo, hi) ranges of the hours of clean whole days
    that start on another local day (or month) than their day's noon, where the report
    keys by local day or month: read again from their hours (rollup_rows' `moved`,
    which a report's statements take when there are any)."""

    workspace_id: int
    start: datetime
    end: datetime
    tz: str
    d0: datetime
    d1: datetime
    dirty: tuple[datetime, ...] = ()
    host_id: int | None = None
    moved: tuple[tuple[datetime, datetime], ...] = ()
    # The electricity prices and carbon intensities of the window (usage reports).
    rates: EnergyRates = NO_RATES

    def hour_ranges(self) -> list[tuple[datetime, datetime]]:
        day = timedelta(days=1)
        pieces = [(self.start, self.d0), *((d, d + day) for d in self.dirty), (self.d1, self.end)]
        merged: list[tuple[datetime, datetime]] = []
        for lo, hi in sorted(p for p in pieces if p[0] < p[1]):
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        return merged

    def params(self) -> dict[str, Any]:
        ranges = self.hour_ranges()
        return {
            "ws": self.workspace_id,
            "start": self.start,
            "end": self.end,
            "tz": self.tz,
            "d0": self.d0,
            "d1": self.d1,
            "dirty": list(self.dirty),
            "lo": [r[0] for r in ranges],
            "hi": [r[1] for r in ranges],
            "host": self.host_id,
            "hours": _hours(ranges),
            "moved": _hours(self.moved),
            **self.rates.params(),
        }


def _hours(ranges: Sequence[tuple[datetime, datetime]]) -> list[datetime]:
    """Every whole hour of the [lo, hi) ranges (whole hours themselves)."""
    return [lo + n * HOUR for lo, hi in ranges for n in range((hi - lo) // HOUR)]


async def prepare(conn: psycopg.AsyncConnection[Any]) -> None:
    """Per report transaction: no JIT. The planner's row guesses for the range lists
    push these short queries over jit_above_cost, and compiling then costs more (~90 ms)
    than running them. Custom plans only, and memory enough to hash the cost query's
    groups."""
    # psycopg prepares a statement run five times on a connection, and PostgreSQL may
    # then keep one generic plan for it, blind to the arrays and the window it is given:
    # the utilization body runs one statement per 10,000 rows, and a 90-day per-GPU body
    # took 4.7 s on the generic plan against 0.55 s planned each time (benchmarks.md).
    # The cost source groups by a computed price segment, whose distinct values the
    # planner cannot know: it guesses ~10^5 groups (there are tens) and, with the default
    # 4 MB, sorts every rollup row instead of hashing them (3x slower, benchmarks.md).
    # One round trip for the three (set_config(..., true) is SET LOCAL).
    await conn.execute(
        "SELECT set_config('jit', 'off', true),"
        " set_config('plan_cache_mode', 'force_custom_plan', true),"
        " set_config('work_mem', '32MB', true)"
    )


async def dirty_days(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, d0: datetime, d1: datetime
) -> tuple[datetime, ...]:
    """Days in [d0, d1) whose hours changed since their day rows were computed, and days
    a price (of GPU-hours or electricity) or a carbon intensity starts inside (not at UTC
    midnight) or a GPU was renamed inside: their day rows span two prices, or two models."""
    if d0 >= d1:
        return ()
    cur = await conn.execute(
        """
        SELECT day_start FROM rollup_dirty_days
        WHERE workspace_id = %(ws)s AND day_start >= %(d0)s AND day_start < %(d1)s
        UNION
        SELECT date_trunc('day', starts_at, 'UTC') FROM prices
        WHERE workspace_id = %(ws)s AND starts_at >= %(d0)s AND starts_at < %(d1)s
          AND starts_at <> date_trunc('day', starts_at, 'UTC')
        UNION
        SELECT date_trunc('day', starts_at, 'UTC') FROM energy_prices
        WHERE workspace_id = %(ws)s AND starts_at >= %(d0)s AND starts_at < %(d1)s
          AND starts_at <> date_trunc('day', starts_at, 'UTC')
        UNION
        SELECT date_trunc('day', starts_at, 'UTC') FROM carbon_intensities
        WHERE workspace_id = %(ws)s AND starts_at >= %(d0)s AND starts_at < %(d1)s
          AND starts_at <> date_trunc('day', starts_at, 'UTC')
        UNION
        SELECT date_trunc('day', until, 'UTC') FROM gpu_name_history
        WHERE workspace_id = %(ws)s AND until >= %(d0)s AND until < %(d1)s
          AND until <> date_trunc('day', until, 'UTC')
        ORDER BY 1
        """,
        {"ws": workspace_id, "d0": d0, "d1": d1},
    )
    return tuple(r[0] for r in await cur.fetchall())


def select_columns(columns: Sequence[str]) -> tuple[str, str]:
    select = ", ".join(f"{_EXPRESSIONS[c]} AS {c}" for c in columns)
    group = ", ".join(str(i + 1) for i in range(len(columns)))
    return select, group


async def held_by(
    conn: psycopg.AsyncConnection[Any],
    scope: Scope,
    columns: Sequence[str],
    pricing: Pricing,
    energy: bool = False,
) -> list[tuple[Any, ...]]:
    """(key columns..., held_us, active_us, idle_held_us, cost numerator[, the users'
    energy sums when `energy`: energy_sums_sql]) from the per-user rollups."""
    select, group = select_columns(columns)
    rated = scope.rates.in_force
    sums = f", {energy_sums_sql('user', rated)}" if energy else ""
    cur = await conn.execute(
        f"""
        SELECT {select},
               sum(held_us)::bigint, sum(active_us)::bigint, sum(idle_held_us)::bigint,
               sum(cost_n){sums}
        FROM {user_source(columns, pricing, rated and energy, energy, bool(scope.moved))}
        GROUP BY {group}
        HAVING sum(held_us) <> 0 OR sum(active_us) <> 0 OR sum(idle_held_us) <> 0
        """,
        scope.params(),
    )
    return await cur.fetchall()


async def covered_by(
    conn: psycopg.AsyncConnection[Any], scope: Scope, columns: Sequence[str]
) -> list[tuple[Any, ...]]:
    """(key columns..., covered_us, the GPUs' energy sums: energy_sums_sql) from the
    per-GPU rollups."""
    select, group = select_columns(columns)
    rated = scope.rates.in_force
    energy = energy_sums_sql("gpu", rated)
    cur = await conn.execute(
        f"""
        SELECT {select}, sum(covered_us)::bigint, {energy}
        FROM {gpu_energy_source(columns, rated, bool(scope.moved))}
        GROUP BY {group}
        HAVING sum(covered_us) <> 0
        """,
        scope.params(),
    )
    return await cur.fetchall()


async def coverage(
    conn: psycopg.AsyncConnection[Any], scope: Scope, with_total: bool = True
) -> tuple[datetime | None, datetime | None, int]:
    """First and last hour with covered GPU time in the window, and the covered total
    (0 unless `with_total`: a caller that summed it already).

    The first and last hour come from the hourly index (a short scan from either end).
    """
    total = f"(SELECT coalesce(sum(covered_us), 0)::bigint FROM {gpu_source((), ('covered_us',))})"
    cur = await conn.execute(
        f"""
        SELECT
            (SELECT min(hour_start) FROM gpu_hour_rollups
             WHERE workspace_id = %(ws)s AND hour_start >= %(start)s AND hour_start < %(end)s
               AND covered_us > 0),
            (SELECT max(hour_start) FROM gpu_hour_rollups
             WHERE workspace_id = %(ws)s AND hour_start >= %(start)s AND hour_start < %(end)s
               AND covered_us > 0),
            {total if with_total else "0"}
        """,
        scope.params(),
    )
    row = await cur.fetchone()
    assert row is not None  # scalar subqueries always answer one row
    return row[0], row[1], int(row[2])


@dataclass(frozen=True)
class HostName:
    public_id: str
    display_name: str


@dataclass(frozen=True)
class GpuName:
    host_id: int
    uuid: str
    index: int
    name: str


async def host_names(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, ids: set[int]
) -> dict[int, HostName]:
    if not ids:
        return {}
    cur = await conn.execute(
        "SELECT id, public_id::text, display_name FROM hosts "
        "WHERE workspace_id = %s AND id = ANY(%s)",
        [workspace_id, sorted(ids)],
    )
    return {r[0]: HostName(r[1], r[2]) for r in await cur.fetchall()}


async def gpu_names(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, ids: set[int]
) -> dict[int, GpuName]:
    if not ids:
        return {}
    cur = await conn.execute(
        "SELECT id, host_id, uuid, gpu_index, name FROM gpus "
        "WHERE workspace_id = %s AND id = ANY(%s)",
        [workspace_id, sorted(ids)],
    )
    return {r[0]: GpuName(r[1], r[2], r[3], r[4]) for r in await cur.fetchall()}


def outside_source(columns: Sequence[str]) -> str:
    """Held time outside any job of its holder (board.jobs: outside_job_hours, credited
    per GPU, Linux user and UTC hour on a cluster's hosts), as rows the usage keys read;
    the directory joined only for a `team` column."""
    team = "d.team" if "team" in columns else "NULL::text"
    directory = (
        "LEFT JOIN directory_entries d ON d.workspace_id = %(ws)s AND d.linux_user = o.linux_user"
        if "team" in columns
        else ""
    )
    return f"""
    (SELECT o.gpu_id, o.host_id, o.linux_user, o.hour_start AS t, o.outside_us, {team} AS team
     FROM outside_job_hours o
     {directory}
     WHERE o.workspace_id = %(ws)s AND o.hour_start >= %(start)s AND o.hour_start < %(end)s
    ) AS r
"""


async def outside_by(
    conn: psycopg.AsyncConnection[Any], scope: Scope, columns: Sequence[str]
) -> dict[tuple[Any, ...], int]:
    """(key columns...) -> µs held outside any job of the holder (user-keyed reports)."""
    select, group = select_columns(columns)
    cur = await conn.execute(
        f"""
        SELECT {select}, sum(outside_us)::bigint
        FROM {outside_source(columns)}
        GROUP BY {group}
        HAVING sum(outside_us) <> 0
        """,
        scope.params(),
    )
    width = len(columns)
    return {tuple(r[:width]): int(r[width]) for r in await cur.fetchall()}
