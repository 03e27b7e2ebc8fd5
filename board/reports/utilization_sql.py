"""The utilization report's SQL: its figures per GPU or host and bucket, from the hour,
host-hour and day rollups, and each row as the text the API sends (PostgreSQL writes the
rows: building 90,000 dicts in Python and encoding them took longer than the query).
board.reports.repository has the report scope and the rest.
"""

from __future__ import annotations

# Each figure as an integer number of millionths (hours, percent, kWh or watts), named here.
FIGURES = (
    "covered",
    "active",
    "idle_held",
    "idle",
    "util_pct",
    "memory_pct",
    "energy",
    "idle_energy",
    "avg_power",
    "energy_covered",
)
# Row fields after the key fields, in board-api.md's order, with their figure columns.
ROW_FIELDS = (
    ("coveredHours", "covered"),
    ("activeHours", "active"),
    ("idleHeldHours", "idle_held"),
    ("idleHours", "idle"),
    ("avgUtilPct", "util_pct"),
    ("avgMemoryUsedPct", "memory_pct"),
    ("energyKWh", "energy"),
    ("idleEnergyKWh", "idle_energy"),
    ("avgPowerW", "avg_power"),
    ("energyCoveredHours", "energy_covered"),
)
# The rollups' sums a row is made of, in _figures' order (energy last).
SUMS = (
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
_ALIASES = ("c", "a", "ih", "i", "u", "mu", "mt", "ec", "ae", "ihe", "ie")
# How every JSON row starts; each key's fields go in front of it.
JSON_ROW_START = b'{"bucketStart":'


def json_number(millionths: str) -> str:
    """A figure kept in millionths as the JSON number Python writes for millionths / 1e6:
    float8 text is the same shortest form, except that it writes whole numbers without
    ".0" (24, not 24.0), which would make them integers to a JSON reader. NULL: null."""
    return (
        f"CASE WHEN {millionths} IS NULL THEN 'null' "
        f"WHEN {millionths} %% 1000000 = 0 THEN ({millionths} / 1000000)::text || '.0' "
        f"ELSE ({millionths}::float8 / 1e6)::text END"
    )


def csv_number(millionths: str) -> str:
    """A figure kept in millionths with exactly 6 decimals, as the CSV writes floats
    (fixed notation); NULL: an empty cell."""
    return (
        f"CASE WHEN {millionths} IS NULL THEN '' ELSE ({millionths} / 1000000)::text || '.' "
        f"|| lpad(({millionths} %% 1000000)::text, 6, '0') END"
    )


def row_text_sql(fmt: str) -> str:
    """Each row's whole text: the row separator first (the body's first row drops it),
    its key's fields (k.prefix), its bucket's label (lb.label), then the figures."""
    if fmt == "json":
        fields = ", ".join(f"',\"{name}\":', {json_number(column)}" for name, column in ROW_FIELDS)
        return f"concat(',', k.prefix, lb.label, {fields}, '}}')"
    fields = ", ".join(f"',', {csv_number(column)}" for _, column in ROW_FIELDS)
    return f"concat(E'\\r\\n', k.prefix, lb.label, {fields})"


def _figures(
    c: str, a: str, ih: str, i: str, u: str, mu: str, mt: str, ec: str, ae: str, ihe: str, ie: str
) -> str:
    """Hours rounded half up to millionths in integer arithmetic (as service.hours),
    time-weighted mean utilization and memory use in millionths of a percent; energy in
    millionths of a kWh (3.6 J; half up, as board.pricing.energy.kwh), the mean power
    over the energy-covered time in millionths of a watt (µJ / µs); and the covered
    microseconds themselves (the coverage total is their sum)."""
    return f"""
        ({c} + 1800) / 3600 AS covered,
        ({a} + 1800) / 3600 AS active,
        ({ih} + 1800) / 3600 AS idle_held,
        ({i} + 1800) / 3600 AS idle,
        round(1e6 * ({u})::float8 / {c})::bigint AS util_pct,
        round(1e8 * ({mu})::float8 / nullif({mt}, 0))::bigint AS memory_pct,
        ({ae} + {ihe} + {ie} + 1800000) / 3600000 AS energy,
        ({ie} + 1800000) / 3600000 AS idle_energy,
        round(1e6 * ({ae} + {ihe} + {ie})::float8 / nullif({ec}, 0))::bigint AS avg_power,
        ({ec} + 1800) / 3600 AS energy_covered,
        {c} AS covered_us"""


def hour_bucket_sql(bucket: str, column: str = "hour_start") -> str:
    """The first instant of the bucket an hour falls in: itself, or its local day's first
    hour (params.Window.day_start): the day's midnight raised to a whole UTC hour, so a
    day of Asia/Kolkata (+05:30) is named by its 00:30, the first hour it holds."""
    if bucket != "day":
        return column
    midnight = f"date_trunc('day', {column}, %(tz)s)"
    return f"(date_trunc('hour', {midnight} - interval '1 microsecond', 'UTC') + interval '1 hour')"


def utilization_figures_sql(
    group: str, bucket: str, one_host: bool = False, keyed: bool = False
) -> str:
    """SELECT of (key: gpu_id or host_id, bucket, the FIGURES) per key and bucket.

    A bucket is at most a day. Hours come from the GPU-hour rows per GPU and from the
    host-hour rows per host (one row per host and hour: nothing is summed for an hourly
    per-host report). Whole UTC days come from the GPU day rows (summed per host for a
    host); the hours around them are summed into their buckets, which never coincide
    with a whole day's bucket. `one_host`: only the rows of the host %(host)s. `keyed`:
    only the keys in %(keys)s (a streamed report reads its keys a batch at a time).
    """
    key = "gpu_id" if group == "gpu" else "host_id"
    hour_table = "gpu_hour_rollups" if group == "gpu" else "host_hour_rollups"
    only = ("AND host_id = %(host)s " if one_host else "") + (
        f"AND {key} = ANY(%(keys)s)" if keyed else ""
    )
    ranges = f"""
        FROM {hour_table}
        JOIN unnest(%(lo)s::timestamptz[], %(hi)s::timestamptz[]) AS rg(lo, hi)
          ON hour_start >= rg.lo AND hour_start < rg.hi
        WHERE workspace_id = %(ws)s {only}"""
    if bucket == "hour":
        # An hour row is its GPU's (or host's) bucket already.
        figures = _figures(*SUMS)
        return f"""
            SELECT {key} AS key, hour_start AS bucket, {figures}
            {ranges} AND covered_us > 0
        """
    # A bucket is named by its first instant; day rows (only used when the report's
    # days are UTC days) already start their bucket.
    day_columns = ", ".join(f"{s} AS {a}" for s, a in zip(SUMS, _ALIASES, strict=True))
    hour_sums = ", ".join(f"sum({s})::bigint" for s in SUMS)
    buckets = f"""
        SELECT {key} AS key, day_start AS bucket, {day_columns}
        FROM gpu_day_rollups
        WHERE workspace_id = %(ws)s AND day_start >= %(d0)s AND day_start < %(d1)s
          AND NOT day_start = ANY(%(dirty)s::timestamptz[]) {only}
        UNION ALL
        SELECT {key}, {hour_bucket_sql(bucket)}, {hour_sums}
        {ranges}
        GROUP BY 1, 2
    """
    if group == "gpu":
        return f"""
            SELECT key, bucket, {_figures(*_ALIASES)}
            FROM ({buckets}) AS b
            WHERE c > 0
        """
    # A GPU's uncovered time adds nothing to any sum, so a host's bucket is simply the
    # sum of its GPUs' rows (bigint is ample for a host-day).
    sums = (f"sum({c})::bigint" for c in _ALIASES)
    return f"""
        SELECT key, bucket, {_figures(*sums)}
        FROM ({buckets}) AS b
        GROUP BY key, bucket
        HAVING sum(c) > 0
    """
