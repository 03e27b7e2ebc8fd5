"""The jobs report's SQL (board.jobs.report): the figures credited per job, GPU and UTC
hour (job_hour_figures) summed over the window, beside the allocated time read from the
allocations themselves (job_gpus), observed or not.

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
# while it runs). A device is counted whether or not a GPU of the host matches it.
_ALLOCATED = """
    allocated AS (
        SELECT jg.job_id,
               sum(extract(epoch FROM greatest(
                   least(coalesce(upper(jg.during), 'infinity'), %(until)s)
                   - greatest(lower(jg.during), %(start)s), interval '0')) * 1000000)::bigint
                   AS allocated_us
        FROM job_gpus jg JOIN jobs j ON j.id = jg.job_id
        WHERE jg.workspace_id = %(ws)s
        GROUP BY jg.job_id
    )"""

# The credited figures per run over the window's hours.
_FIGURES = """
    figures AS (
        SELECT f.job_id, sum(f.covered_us)::bigint AS covered_us,
               sum(f.active_us)::bigint AS active_us, sum(f.idle_held_us)::bigint AS idle_us,
               sum(f.foreign_us)::bigint AS foreign_us, sum(f.unused_us)::bigint AS unused_us,
               sum(f.util_pct_us) AS util_us, max(f.max_memory_used_mb) AS memory_mb
        FROM job_hour_figures f {only_jobs}
        WHERE f.workspace_id = %(ws)s AND f.hour_start >= %(start)s AND f.hour_start < %(end)s
        GROUP BY f.job_id
    )"""
# With a filter the figures are read for the chosen runs only (by the primary key).
_ONLY_JOBS = "JOIN jobs j ON j.id = f.job_id"

# The figure columns every row ends with, then the totals over all rows (window
# aggregates: computed before the row limit cuts).
_SUMS = """
    coalesce(sum(a.allocated_us), 0)::bigint AS allocated_us,
    coalesce(sum(f.covered_us), 0)::bigint AS covered_us,
    coalesce(sum(f.active_us), 0)::bigint AS active_us,
    coalesce(sum(f.idle_us), 0)::bigint AS idle_us,
    coalesce(sum(f.foreign_us), 0)::bigint AS foreign_us,
    coalesce(sum(f.unused_us), 0)::bigint AS unused_us,
    coalesce(sum(f.util_us), 0) AS util_us,
    max(f.memory_mb) AS memory_mb"""
# Per run (groupBy=job) each run is one row already: no regrouping by its eleven fields.
_OWN = """
    coalesce(a.allocated_us, 0)::bigint AS allocated_us,
    coalesce(f.covered_us, 0)::bigint AS covered_us,
    coalesce(f.active_us, 0)::bigint AS active_us,
    coalesce(f.idle_us, 0)::bigint AS idle_us,
    coalesce(f.foreign_us, 0)::bigint AS foreign_us,
    coalesce(f.unused_us, 0)::bigint AS unused_us,
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


def keyed_sql(group: str, sort: str, filtered: bool) -> str:
    """Rows per run, Linux user, account (with its team) or partition."""
    columns, order = KEYS[group]
    team_join = _TEAM_JOIN if group == "account" else ""
    group_by = ""
    if group != "job":
        group_by = "GROUP BY " + ", ".join(str(i + 1) for i in range(KEY_WIDTH[group]))
    return f"""
    WITH {_JOBS}, {_ALLOCATED}, {_FIGURES.format(only_jobs=_ONLY_JOBS if filtered else "")},
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


def day_sql(sort: str, filtered: bool) -> str:
    """Rows per local day: the figures by the day their UTC hour starts on, and the
    allocations cut at the days' bounds (computed in Python by the hour-start rule)."""
    only_jobs = _ONLY_JOBS if filtered else ""
    return f"""
    WITH {_JOBS},
    days AS (
        SELECT * FROM unnest(%(days)s::date[], %(day_lo)s::timestamptz[],
                             %(day_hi)s::timestamptz[]) AS d(day, lo, hi)
    ),
    allocated AS (
        SELECT d.day,
               sum(extract(epoch FROM greatest(
                   least(coalesce(upper(jg.during), 'infinity'), d.hi, %(until)s)
                   - greatest(lower(jg.during), d.lo), interval '0')) * 1000000)::bigint
                   AS allocated_us
        FROM job_gpus jg JOIN jobs j ON j.id = jg.job_id
        JOIN days d ON jg.during && tstzrange(d.lo, d.hi)
        WHERE jg.workspace_id = %(ws)s
        GROUP BY d.day
    ),
    figures AS (
        SELECT (f.hour_start AT TIME ZONE %(tz)s)::date AS day,
               sum(f.covered_us)::bigint AS covered_us,
               sum(f.active_us)::bigint AS active_us, sum(f.idle_held_us)::bigint AS idle_us,
               sum(f.foreign_us)::bigint AS foreign_us, sum(f.unused_us)::bigint AS unused_us,
               sum(f.util_pct_us) AS util_us, max(f.max_memory_used_mb) AS memory_mb
        FROM job_hour_figures f {only_jobs}
        WHERE f.workspace_id = %(ws)s AND f.hour_start >= %(start)s AND f.hour_start < %(end)s
        GROUP BY 1
    ),
    grouped AS (
        SELECT day, coalesce(a.allocated_us, 0)::bigint AS allocated_us,
               coalesce(f.covered_us, 0)::bigint AS covered_us,
               coalesce(f.active_us, 0)::bigint AS active_us,
               coalesce(f.idle_us, 0)::bigint AS idle_us,
               coalesce(f.foreign_us, 0)::bigint AS foreign_us,
               coalesce(f.unused_us, 0)::bigint AS unused_us,
               coalesce(f.util_us, 0) AS util_us, f.memory_mb
        FROM allocated a FULL JOIN figures f USING (day)
    )
    SELECT day, {", ".join(FIGURE_COLUMNS)}{_TOTALS}
    FROM grouped
    WHERE allocated_us <> 0 OR covered_us <> 0
    ORDER BY {SORTS[sort].format(key="day")}
    LIMIT %(limit)s
    """
