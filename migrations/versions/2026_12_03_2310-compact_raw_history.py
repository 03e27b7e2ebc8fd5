"""compact raw history

One row per observation instead of one per observation, GPU and process: the GPUs and
processes become typed arrays in the observation's row (host_observations), and closed
days are compacted into one row per host and hour (observation_hours, not partitioned:
its rows are few, and retention deletes them a day at a time; an array of the
composite type observation_record, compressed by TOAST). Readers go through
raw_observations(workspace, host, from, to) or read both tables; the views
gpu_samples and process_samples keep the old per-sample shape for people and tests.
Existing rows are converted (kept hot: the next maintenance run compacts closed days).
ADR 0010 explains the design and the alternatives measured.

Revision ID: a22b4e8f1c20
Revises: a21c0d7e5b10
Create Date: 2026-12-03 23:10:00
"""

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "a22b4e8f1c20"
down_revision: str | None = "a21c0d7e5b10"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The observation's own fields, then its GPUs and processes as arrays parallel by position.
_RECORD_COLUMNS = """
    observed_at timestamptz NOT NULL,
    received_at timestamptz NOT NULL,
    collection_status text NOT NULL,
    errors text[] NOT NULL,
    agent_version text NOT NULL,
    driver_version text NOT NULL,
    gpu_id bigint[] NOT NULL,
    gpu_index smallint[] NOT NULL,
    gpu_util_pct smallint[] NOT NULL,
    gpu_memory_used_mb integer[] NOT NULL,
    gpu_memory_total_mb integer[] NOT NULL,
    gpu_temperature_c smallint[] NOT NULL,
    gpu_power_w integer[] NOT NULL,
    gpu_reported_state text[] NOT NULL,
    gpu_state text[] NOT NULL,
    process_gpu_id bigint[] NOT NULL,
    process_pid integer[] NOT NULL,
    process_user text[] NOT NULL,
    process_name text[] NOT NULL,
    process_type text[] NOT NULL,
    process_memory_mb bigint[] NOT NULL
"""
_FIELDS = [line.split()[0] for line in _RECORD_COLUMNS.strip().splitlines()]
# A composite type's attributes take no constraints.
_RECORD_ATTRIBUTES = _RECORD_COLUMNS.replace(" NOT NULL", "")
_O_FIELDS = ", ".join(f"o.{f}" for f in _FIELDS)

_FUNCTIONS = f"""
-- A host's observations in [lo, hi], hot and compacted alike (inlined by the planner, so
-- the bounds reach each side's primary key and prune partitions).
CREATE FUNCTION raw_observations(ws bigint, host bigint, lo timestamptz, hi timestamptz)
RETURNS SETOF observation_record LANGUAGE sql STABLE AS $$
    SELECT {_O_FIELDS}
    FROM host_observations o
    WHERE o.workspace_id = ws AND o.host_id = host AND o.observed_at >= lo AND o.observed_at <= hi
    UNION ALL
    SELECT r.*
    FROM observation_hours c CROSS JOIN LATERAL unnest(c.records) r
    WHERE c.workspace_id = ws AND c.host_id = host
      AND c.hour_start > lo - interval '1 hour' AND c.hour_start <= hi
      AND c.last_at >= lo AND c.first_at <= hi
      AND r.observed_at >= lo AND r.observed_at <= hi
$$;

-- Every stored observation, hot and compacted (for people and tests; code reads the
-- function above, which bounds the hours it unpacks).
CREATE VIEW raw_history AS
    SELECT o.workspace_id, o.host_id, {_O_FIELDS} FROM host_observations o
    UNION ALL
    SELECT c.workspace_id, c.host_id, r.*
    FROM observation_hours c CROSS JOIN LATERAL unnest(c.records) r;

-- The old per-sample shapes, one row per GPU and per process.
CREATE VIEW gpu_samples AS
    SELECT h.workspace_id, h.host_id, h.observed_at, g.gpu_id, g.gpu_index, g.util_pct,
           g.memory_used_mb, g.memory_total_mb, g.temperature_c, g.power_w,
           g.reported_state, g.state
    FROM raw_history h
    CROSS JOIN LATERAL unnest(h.gpu_id, h.gpu_index, h.gpu_util_pct, h.gpu_memory_used_mb,
        h.gpu_memory_total_mb, h.gpu_temperature_c, h.gpu_power_w, h.gpu_reported_state,
        h.gpu_state)
        AS g(gpu_id, gpu_index, util_pct, memory_used_mb, memory_total_mb, temperature_c,
             power_w, reported_state, state);

CREATE VIEW process_samples AS
    SELECT h.workspace_id, h.host_id, h.observed_at, p.gpu_id, p.pid, p.linux_user, p.name,
           p.type, p.memory_used_mb
    FROM raw_history h
    CROSS JOIN LATERAL unnest(h.process_gpu_id, h.process_pid, h.process_user,
        h.process_name, h.process_type, h.process_memory_mb)
        AS p(gpu_id, pid, linux_user, name, type, memory_used_mb);
"""

# The old tables' rows, one per observation with its samples as arrays (GPUs by index,
# processes by GPU and pid).
_STAGE = """
CREATE TABLE observation_staging AS
SELECT o.workspace_id, o.host_id, o.observed_at, o.received_at, o.collection_status,
       o.errors, o.agent_version, o.driver_version,
       coalesce(g.gpu_id, '{}') AS gpu_id, coalesce(g.gpu_index, '{}') AS gpu_index,
       coalesce(g.util_pct, '{}') AS gpu_util_pct,
       coalesce(g.memory_used_mb, '{}') AS gpu_memory_used_mb,
       coalesce(g.memory_total_mb, '{}') AS gpu_memory_total_mb,
       coalesce(g.temperature_c, '{}') AS gpu_temperature_c,
       coalesce(g.power_w, '{}') AS gpu_power_w,
       coalesce(g.reported_state, '{}') AS gpu_reported_state,
       coalesce(g.state, '{}') AS gpu_state,
       coalesce(p.gpu_id, '{}') AS process_gpu_id, coalesce(p.pid, '{}') AS process_pid,
       coalesce(p.linux_user, '{}') AS process_user, coalesce(p.name, '{}') AS process_name,
       coalesce(p.type, '{}') AS process_type,
       coalesce(p.memory_used_mb, '{}') AS process_memory_mb
FROM host_observations o
LEFT JOIN LATERAL (
    SELECT array_agg(s.gpu_id ORDER BY s.gpu_index, s.gpu_id) AS gpu_id,
           array_agg(s.gpu_index ORDER BY s.gpu_index, s.gpu_id) AS gpu_index,
           array_agg(s.util_pct ORDER BY s.gpu_index, s.gpu_id) AS util_pct,
           array_agg(s.memory_used_mb ORDER BY s.gpu_index, s.gpu_id) AS memory_used_mb,
           array_agg(s.memory_total_mb ORDER BY s.gpu_index, s.gpu_id) AS memory_total_mb,
           array_agg(s.temperature_c ORDER BY s.gpu_index, s.gpu_id) AS temperature_c,
           array_agg(s.power_w ORDER BY s.gpu_index, s.gpu_id) AS power_w,
           array_agg(s.reported_state ORDER BY s.gpu_index, s.gpu_id) AS reported_state,
           array_agg(s.state ORDER BY s.gpu_index, s.gpu_id) AS state
    FROM gpu_samples s
    WHERE s.workspace_id = o.workspace_id AND s.host_id = o.host_id
      AND s.observed_at = o.observed_at
) g ON true
LEFT JOIN LATERAL (
    SELECT array_agg(s.gpu_id ORDER BY s.gpu_id, s.pid, s.linux_user, s.name) AS gpu_id,
           array_agg(s.pid ORDER BY s.gpu_id, s.pid, s.linux_user, s.name) AS pid,
           array_agg(s.linux_user ORDER BY s.gpu_id, s.pid, s.linux_user, s.name) AS linux_user,
           array_agg(s.name ORDER BY s.gpu_id, s.pid, s.linux_user, s.name) AS name,
           array_agg(s.type ORDER BY s.gpu_id, s.pid, s.linux_user, s.name) AS type,
           array_agg(s.memory_used_mb ORDER BY s.gpu_id, s.pid, s.linux_user, s.name)
               AS memory_used_mb
    FROM process_samples s
    WHERE s.workspace_id = o.workspace_id AND s.host_id = o.host_id
      AND s.observed_at = o.observed_at
) p ON true
"""


def _partition_days(table: str) -> list[date]:
    rows = op.get_bind().execute(
        sa.text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE p.relname = :t"
        ),
        {"t": table},
    )
    days = []
    for (name,) in rows:
        suffix = str(name).rsplit("_p", 1)[-1]
        if suffix.isdigit() and len(suffix) == 8:
            days.append(datetime.strptime(suffix, "%Y%m%d").date())
    return sorted(days)


def _create_day_partitions(table: str, days: list[date]) -> None:
    # Named as board.observations names them, so its maintenance adopts them.
    for day in days:
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        op.execute(
            f"CREATE TABLE {table}_p{day:%Y%m%d} PARTITION OF {table} "
            f"FOR VALUES FROM ('{start.isoformat()}') "
            f"TO ('{(start + timedelta(days=1)).isoformat()}')"
        )


def _lz4_available() -> bool:
    row = op.get_bind().execute(
        sa.text(
            "SELECT 'lz4' = ANY (enumvals) FROM pg_settings "
            "WHERE name = 'default_toast_compression'"
        )
    )
    return bool(row.scalar())


def upgrade() -> None:
    days = _partition_days("host_observations")
    op.execute(_STAGE)
    op.execute("DROP TABLE process_samples, gpu_samples, host_observations")
    op.execute(f"CREATE TYPE observation_record AS ({_RECORD_ATTRIBUTES})")
    op.execute(
        f"""
        CREATE TABLE host_observations (
            workspace_id bigint NOT NULL,
            host_id bigint NOT NULL,
            {_RECORD_COLUMNS},
            CONSTRAINT pk_host_observations PRIMARY KEY (workspace_id, host_id, observed_at)
        ) PARTITION BY RANGE (observed_at)
        """
    )
    op.execute(
        """
        CREATE TABLE observation_hours (
            workspace_id bigint NOT NULL,
            host_id bigint NOT NULL,
            hour_start timestamptz NOT NULL,
            first_at timestamptz NOT NULL,
            last_at timestamptz NOT NULL,
            observed_ats timestamptz[] NOT NULL,
            records observation_record[] NOT NULL,
            CONSTRAINT pk_observation_hours PRIMARY KEY (workspace_id, host_id, hour_start)
        )
        """
    )
    if _lz4_available():
        # pglz (the default) otherwise.
        op.execute("ALTER TABLE observation_hours ALTER COLUMN records SET COMPRESSION lz4")
    _create_day_partitions("host_observations", days)
    op.execute(
        f"INSERT INTO host_observations (workspace_id, host_id, {', '.join(_FIELDS)}) "
        f"SELECT workspace_id, host_id, {', '.join(_FIELDS)} FROM observation_staging"
    )
    op.execute("DROP TABLE observation_staging")
    op.execute(_FUNCTIONS)


def downgrade() -> None:
    days = _partition_days("host_observations")
    op.execute("CREATE TABLE observation_staging AS SELECT * FROM raw_history")
    op.execute(
        "CREATE TABLE gpu_staging AS SELECT * FROM gpu_samples; "
        "CREATE TABLE process_staging AS SELECT * FROM process_samples"
    )
    op.execute(
        "DROP VIEW process_samples, gpu_samples, raw_history; "
        "DROP FUNCTION raw_observations; DROP TABLE observation_hours, host_observations; "
        "DROP TYPE observation_record"
    )
    op.execute(
        """
        CREATE TABLE host_observations (
            workspace_id bigint NOT NULL, host_id bigint NOT NULL,
            observed_at timestamptz NOT NULL, received_at timestamptz NOT NULL,
            collection_status text NOT NULL, errors text[] NOT NULL,
            agent_version text NOT NULL, driver_version text NOT NULL,
            CONSTRAINT pk_host_observations PRIMARY KEY (workspace_id, host_id, observed_at)
        ) PARTITION BY RANGE (observed_at);
        CREATE TABLE gpu_samples (
            workspace_id bigint NOT NULL, host_id bigint NOT NULL,
            observed_at timestamptz NOT NULL, gpu_id bigint NOT NULL,
            gpu_index smallint NOT NULL, util_pct smallint NOT NULL,
            memory_used_mb integer NOT NULL, memory_total_mb integer NOT NULL,
            temperature_c smallint, power_w integer, reported_state text, state text NOT NULL,
            CONSTRAINT pk_gpu_samples PRIMARY KEY (workspace_id, host_id, observed_at, gpu_id)
        ) PARTITION BY RANGE (observed_at);
        CREATE TABLE process_samples (
            workspace_id bigint NOT NULL, host_id bigint NOT NULL,
            observed_at timestamptz NOT NULL, gpu_id bigint NOT NULL, pid integer NOT NULL,
            linux_user text NOT NULL, name text NOT NULL, type text NOT NULL,
            memory_used_mb bigint
        ) PARTITION BY RANGE (observed_at);
        CREATE INDEX ix_process_samples_host_time
            ON process_samples (workspace_id, host_id, observed_at);
        """
    )
    for table in ("host_observations", "gpu_samples", "process_samples"):
        _create_day_partitions(table, days)
    op.execute(
        "INSERT INTO host_observations SELECT workspace_id, host_id, observed_at, received_at, "
        "collection_status, errors, agent_version, driver_version FROM observation_staging; "
        "INSERT INTO gpu_samples SELECT * FROM gpu_staging; "
        "INSERT INTO process_samples SELECT * FROM process_staging; "
        "DROP TABLE observation_staging, gpu_staging, process_staging"
    )
