"""The jobs report's SQL (board.jobs.report): the figures credited per job, GPU and UTC
day or hour (job_day_figures; job_hours: job_hour_figures and the GPU-hour rows' job
sums) summed over the window, beside the allocated time read from the allocations
themselves (job_gpus), observed or not.

Every statement is scoped by workspace and window; key expressions and orders come from
the fixed tables below, never from the request.
"""

from __future__ import annotations

# The runs whose allocation meets the window [start, until), until = min(to, now): a run
# still going counts up to now, never into the future. Filters are optional (NULL: all).
_JOBS = """
    jobs AS (
        SELECT id, public_id, cluster, job_id, linux_user, account, partition, name, state,
               started_at, ended_at
        FROM scheduler_jobs
        WHERE workspace_id = %(ws)s AND started_at < %(until)s
          AND (ended_at IS NULL OR ended_at > %(start)s)
          AND (%(user)s::text IS NULL OR linux_user = %(user)s::text)
          AND (%(account)s::text IS NULL OR account = %(account)s::text)
    )"""

# Allocated µs per run: each allocated device's range clipped to the window (and to now
# while it runs). A device is counted whether or not a GPU of the host matches it. A run
# that ended the instant it started has an empty range: no time (its bounds are NULL).
# The runs' allocations are looked up by their ids (the primary key): joined to the
# runs, PostgreSQL hashed every allocation ever made (1.3 M rows, ~2 s, at 2,000 GPUs
# with 400 days of jobs) to keep a month's.
_ALLOCATED = """
    allocated AS (
        SELECT jg.job_id,
               sum(extract(epoch FROM greatest(
                   least(coalesce(upper(jg.during), 'infinity'), %(until)s)
                   - greatest(lower(jg.during), %(start)s), interval '0')) * 1000000)
                   AS allocated_us
        FROM job_gpus jg
        WHERE jg.workspace_id = %(ws)s AND jg.job_id = ANY(ARRAY(SELECT id FROM jobs))
          AND NOT isempty(jg.during)
        GROUP BY jg.job_id
    )"""

# The credited figures of the window: the day rows (job_day_figures, board.jobs.days) of
# the clean whole UTC days in [d0, d1), the hour rows of the rest (the hours around those
# days, and the dirty days), like the usage report's rollups. `t` is the row's day or
# hour. With a filter, both sides are read for the chosen runs only, by primary key.
_SOURCE = """
    (SELECT x.job_id, x.day_start AS t, {columns}
     FROM job_day_figures x {only_jobs}
     WHERE x.workspace_id = %(ws)s AND x.day_start >= %(d0)s AND x.day_start < %(d1)s
       AND NOT x.day_start = ANY(%(dirty)s::timestamptz[])
     UNION ALL
     SELECT x.job_id, x.hour_start, {columns}
     FROM {hours}) AS f"""
# The hours as [lo, hi) ranges, each its own probe of the (workspace, hour_start) index
# (LATERAL ... OFFSET 0): when they are a small part of the window (its edges, a few
# dirty days). Joined to the ranges as a whole, a month of hour rows was read through and
# filtered: 0.5 s for the day of edges.
_RANGED_HOURS = """unnest(%(lo)s::timestamptz[], %(hi)s::timestamptz[]) AS rg(lo, hi)
     CROSS JOIN LATERAL (
        SELECT * FROM job_hours h
        WHERE h.workspace_id = %(ws)s AND h.hour_start >= rg.lo AND h.hour_start < rg.hi
        OFFSET 0) AS x"""
# Or the window's hours read through (a parallel scan: what probing by the index costs
# several times over) but those the day rows serve: with no day rows, or many dirty days.
_WINDOW_HOURS = """job_hours x {only_jobs}
     WHERE x.workspace_id = %(ws)s AND x.hour_start >= %(start)s AND x.hour_start < %(end)s
       AND (x.hour_start < %(d0)s OR x.hour_start >= %(d1)s
            OR date_trunc('day', x.hour_start, 'UTC') = ANY(%(dirty)s::timestamptz[]))"""
_SOURCE_COLUMNS = ", ".join(
    f"x.{c}"
    for c in (
        "covered_us",
        "active_us",
        "idle_held_us",
        "foreign_us",
        "unused_us",
        "util_pct_us",
        "max_memory_used_mb",
    )
)
_ONLY_JOBS = "JOIN jobs j ON j.id = x.job_id"


def _source(filtered: bool, ranged: bool) -> str:
    only_jobs = _ONLY_JOBS if filtered else ""
    hours = _RANGED_HOURS if ranged and not filtered else _WINDOW_HOURS
    return _SOURCE.format(
        columns=_SOURCE_COLUMNS,
        only_jobs=only_jobs,
        hours=hours.format(only_jobs=only_jobs),
    )


_FIGURE_SUMS = """
    sum(f.covered_us) AS covered_us, sum(f.active_us) AS active_us,
    sum(f.idle_held_us) AS idle_us, sum(f.foreign_us) AS foreign_us,
    sum(f.unused_us) AS unused_us, sum(f.util_pct_us) AS util_us,
    max(f.max_memory_used_mb) AS memory_mb"""

# The credited figures per run over the window.
_FIGURES = """
    figures AS (
        SELECT f.job_id, {sums}
        FROM {source}
        GROUP BY f.job_id
    )"""

# Every sum stays numeric (PostgreSQL's sum of bigint): a window's allocated µs over many
# overlapping runs (a node may record thousands, each of 64 devices) pass 2**63, and a
# cast to bigint made the report a 500 for the whole workspace. Python reads them as
# Decimal and makes exact ints of them (figures()).
# The figure columns every row ends with, then the totals over all rows (window
# aggregates: computed before the row limit cuts).
_SUMS = """
    coalesce(sum(a.allocated_us), 0) AS allocated_us,
    coalesce(sum(f.covered_us), 0) AS covered_us,
    coalesce(sum(f.active_us), 0) AS active_us,
    coalesce(sum(f.idle_us), 0) AS idle_us,
    coalesce(sum(f.foreign_us), 0) AS foreign_us,
    coalesce(sum(f.unused_us), 0) AS unused_us,
    coalesce(sum(f.util_us), 0) AS util_us,
    max(f.memory_mb) AS memory_mb"""
# Per run (groupBy=job) each run is one row already: no regrouping by its eleven fields.
_OWN = """
    coalesce(a.allocated_us, 0) AS allocated_us,
    coalesce(f.covered_us, 0) AS covered_us,
    coalesce(f.active_us, 0) AS active_us,
    coalesce(f.idle_us, 0) AS idle_us,
    coalesce(f.foreign_us, 0) AS foreign_us,
    coalesce(f.unused_us, 0) AS unused_us,
    coalesce(f.util_us, 0) AS util_us,
    f.memory_mb"""
FIGURE_COLUMNS = (
    "allocated_us",
    "covered_us",
    "active_us",
    "idle_us",
    "foreign_us",
    "unused_us",
    "util_us",
    "memory_mb",
)
_TOTALS = """,
    count(*) OVER () AS row_count,
    sum(allocated_us) OVER (), sum(covered_us) OVER (), sum(active_us) OVER (),
    sum(idle_us) OVER (), sum(foreign_us) OVER (), sum(unused_us) OVER (),
    sum(util_us) OVER (), max(memory_mb) OVER ()"""

# Per key: its SQL columns (after the figures are summed per run), and its ascending order.
KEYS = {
    "job": (
        "j.id, j.public_id::text, j.cluster, j.job_id, j.linux_user, j.account, j.partition, "
        "j.name, j.state, j.started_at, j.ended_at",
        "started_at, id",
    ),
    "user": ("j.linux_user", 'linux_user COLLATE "C"'),
    "account": ("j.account, t.team", 'account COLLATE "C"'),
    "partition": ("j.partition", 'partition COLLATE "C"'),
}
KEY_WIDTH = {"job": 11, "user": 1, "account": 2, "partition": 1, "day": 1}
# The key's columns as the outer SELECT names them (for ORDER BY).
_NAMES = {
    "job": "id, public_id, cluster, job_id, linux_user, account, partition, name, state, "
    "started_at, ended_at",
    "user": "linux_user",
    "account": "account, team",
    "partition": "partition",
}
_TEAM_JOIN = "LEFT JOIN account_teams t ON t.workspace_id = %(ws)s AND t.account = j.account"

# Sorts: the most wasted first (ties by key), the most allocated first, or the key.
SORTS = {
    "wasted": "(idle_us + unused_us) DESC, {key}",
    "allocated": "allocated_us DESC, {key}",
    "key": "{key}",
}


def keyed_sql(group: str, sort: str, filtered: bool, ranged: bool = False) -> str:
    """Rows per run, Linux user, account (with its team) or partition. `ranged`: the
    hours read are a small part of the window (the [lo, hi) ranges)."""
    columns, order = KEYS[group]
    team_join = _TEAM_JOIN if group == "account" else ""
    group_by = ""
    if group != "job":
        group_by = "GROUP BY " + ", ".join(str(i + 1) for i in range(KEY_WIDTH[group]))
    figures = _FIGURES.format(sums=_FIGURE_SUMS, source=_source(filtered, ranged))
    return f"""
    WITH {_JOBS}, {_ALLOCATED}, {figures},
    grouped AS (
        SELECT {columns}, {_OWN if group == "job" else _SUMS}
        FROM jobs j
        LEFT JOIN allocated a ON a.job_id = j.id
        LEFT JOIN figures f ON f.job_id = j.id
        {team_join}
        {group_by}
    )
    SELECT {_NAMES[group]}, {", ".join(FIGURE_COLUMNS)}{_TOTALS}
    FROM grouped
    WHERE allocated_us <> 0 OR covered_us <> 0
    ORDER BY {SORTS[sort].format(key=order)}
    LIMIT %(limit)s
    """


def day_sql(sort: str, filtered: bool, ranged: bool = False) -> str:
    """Rows per local day: the figures by the day their UTC hour (or UTC day, when days
    are UTC days) starts on, and the allocations cut at the days' bounds (computed in
    Python by the hour-start rule).

    A run's devices share its range, so the allocations are summed per distinct range,
    and each range meets only the days it spans (their lower bounds are sorted: found by
    width_bucket). Every allocation tried against every day was 128 million range tests
    for 5,000 long runs of 64 devices over 400 days: a minute of the database.
    """
    return f"""
    WITH {_JOBS},
    days AS (
        SELECT * FROM unnest(%(days)s::date[], %(day_lo)s::timestamptz[],
                             %(day_hi)s::timestamptz[]) WITH ORDINALITY AS d(day, lo, hi, i)
    ),
    ranges AS (
        SELECT jg.during, count(*) AS devices
        FROM job_gpus jg
        WHERE jg.workspace_id = %(ws)s AND jg.job_id = ANY(ARRAY(SELECT id FROM jobs))
          AND NOT isempty(jg.during)
        GROUP BY jg.during
    ),
    allocated AS (
        SELECT d.day,
               sum(r.devices * extract(epoch FROM greatest(
                   least(coalesce(upper(r.during), 'infinity'), d.hi, %(until)s)
                   - greatest(lower(r.during), d.lo), interval '0')) * 1000000)
                   AS allocated_us
        FROM ranges r
        CROSS JOIN LATERAL generate_series(
            greatest(width_bucket(lower(r.during), %(day_lo)s::timestamptz[]), 1),
            width_bucket(least(coalesce(upper(r.during), 'infinity'), %(until)s),
                         %(day_lo)s::timestamptz[])) AS s(i)
        JOIN days d ON d.i = s.i
        GROUP BY d.day
    ),
    figures AS (
        SELECT (f.t AT TIME ZONE %(tz)s)::date AS day, {_FIGURE_SUMS}
        FROM {_source(filtered, ranged)}
        GROUP BY 1
    ),
    grouped AS (
        SELECT day, coalesce(a.allocated_us, 0) AS allocated_us,
               coalesce(f.covered_us, 0) AS covered_us,
               coalesce(f.active_us, 0) AS active_us,
               coalesce(f.idle_us, 0) AS idle_us,
               coalesce(f.foreign_us, 0) AS foreign_us,
               coalesce(f.unused_us, 0) AS unused_us,
               coalesce(f.util_us, 0) AS util_us, f.memory_mb
        FROM allocated a FULL JOIN figures f USING (day)
    )
    SELECT day, {", ".join(FIGURE_COLUMNS)}{_TOTALS}
    FROM grouped
    WHERE allocated_us <> 0 OR covered_us <> 0
    ORDER BY {SORTS[sort].format(key="day")}
    LIMIT %(limit)s
    """
