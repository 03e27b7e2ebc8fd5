"""job hours on GPU rows

A job run's figures for a UTC hour that lies wholly inside its range, on a GPU no other
run of the host touches in that hour, move onto the GPU-hour rollup row (job_id and the
job_* sums), which ingest upserts for that GPU and hour anyway; partial hours, and hours
two runs share, stay in job_hour_figures (board.jobs.crediting). The view job_hours reads
both as one table of (job, GPU, hour) rows, which is what every reader sums.

Upgrade moves the figure rows that belong on a GPU row now (the hour wholly inside the
run's range on that GPU, no other run's range on the GPU touching it, no other run's
figures in that GPU hour) onto it, creating the GPU-hour row with zero rollup sums were
it missing, so that crediting and un-crediting find them where they now route. Downgrade
moves them back and drops the columns. A statement trigger marks
the UTC days of GPU-hour rows with a job as job days to refresh (job_dirty_days), as
the one on job_hour_figures does.

Revision ID: ebc805335a29
Revises: 0188b06eecde
Create Date: 2026-12-05 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "ebc805335a29"
down_revision: str | None = "0188b06eecde"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SUMS = ("covered_us", "active_us", "idle_held_us", "foreign_us", "unused_us", "util_pct_us")

EVENTS = (
    ("insert", "NEW TABLE AS new_rows"),
    ("update", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
    ("delete", "OLD TABLE AS old_rows"),
)

# As job_days_mark_dirty (migration "job day figures"), for the rows that hold a job.
MARK_DIRTY = """
CREATE FUNCTION job_rides_mark_dirty() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO job_dirty_days (workspace_id, day_start)
        SELECT DISTINCT workspace_id, date_trunc('day', hour_start, 'UTC') FROM old_rows
        WHERE job_id IS NOT NULL
        ORDER BY 1, 2
        ON CONFLICT DO NOTHING;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO job_dirty_days (workspace_id, day_start)
        SELECT DISTINCT workspace_id, date_trunc('day', hour_start, 'UTC') FROM new_rows
        WHERE job_id IS NOT NULL
        ORDER BY 1, 2
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;
"""

_COLUMNS = ", ".join(SUMS)
JOB_HOURS = f"""
CREATE VIEW job_hours AS
SELECT workspace_id, job_id, gpu_id, hour_start, host_id, {_COLUMNS}, max_memory_used_mb
FROM job_hour_figures
UNION ALL
SELECT workspace_id, job_id, gpu_id, hour_start, host_id,
       {", ".join(f"job_{c}" for c in SUMS)}, job_max_memory_used_mb
FROM gpu_hour_rollups
WHERE job_id IS NOT NULL
"""

_HOUR = "tstzrange(f.hour_start, f.hour_start + interval '1 hour', '[)')"
MOVE_WHOLE_HOURS = f"""
WITH ranges AS (
    SELECT jg.workspace_id, jg.job_id, g.id AS gpu_id, jg.during
    FROM job_gpus jg
    JOIN gpus g ON g.workspace_id = jg.workspace_id AND g.host_id = jg.host_id
               AND coalesce(g.minor_number, g.gpu_index) = jg.device
    WHERE NOT isempty(jg.during)
), whole AS (
    SELECT DISTINCT f.workspace_id, f.job_id, f.gpu_id, f.hour_start
    FROM job_hour_figures f
    JOIN ranges r ON r.workspace_id = f.workspace_id AND r.job_id = f.job_id
                 AND r.gpu_id = f.gpu_id AND r.during @> {_HOUR}
    WHERE NOT EXISTS (
        SELECT 1 FROM ranges o
        WHERE o.workspace_id = f.workspace_id AND o.gpu_id = f.gpu_id
          AND o.job_id <> f.job_id AND o.during && {_HOUR})
      AND NOT EXISTS (
        SELECT 1 FROM job_hour_figures o
        WHERE o.workspace_id = f.workspace_id AND o.gpu_id = f.gpu_id
          AND o.hour_start = f.hour_start AND o.job_id <> f.job_id)
), moved AS (
    DELETE FROM job_hour_figures f USING whole w
    WHERE f.workspace_id = w.workspace_id AND f.job_id = w.job_id AND f.gpu_id = w.gpu_id
      AND f.hour_start = w.hour_start
    RETURNING f.*
)
INSERT INTO gpu_hour_rollups AS r (workspace_id, gpu_id, hour_start, host_id, covered_us,
    active_us, idle_held_us, idle_us, util_pct_us, memory_used_mb_us, memory_total_mb_us,
    sample_count, job_id, {", ".join(f"job_{c}" for c in SUMS)}, job_max_memory_used_mb)
SELECT m.workspace_id, m.gpu_id, m.hour_start, m.host_id, 0, 0, 0, 0, 0, 0, 0, 0, m.job_id,
       {", ".join(f"m.{c}" for c in SUMS)}, m.max_memory_used_mb
FROM moved m
ON CONFLICT (workspace_id, gpu_id, hour_start) DO UPDATE SET
    job_id = EXCLUDED.job_id,
    {", ".join(f"job_{c} = EXCLUDED.job_{c}" for c in SUMS)},
    job_max_memory_used_mb = EXCLUDED.job_max_memory_used_mb
"""


def upgrade() -> None:
    op.add_column("gpu_hour_rollups", sa.Column("job_id", sa.BigInteger(), nullable=True))
    for name in SUMS:
        op.add_column(
            "gpu_hour_rollups",
            sa.Column(f"job_{name}", sa.BigInteger(), server_default="0", nullable=False),
        )
    op.add_column(
        "gpu_hour_rollups",
        sa.Column("job_max_memory_used_mb", sa.Integer(), server_default="0", nullable=False),
    )
    # The job hours on GPU rows by run (a job's page) and by hour (the jobs report's
    # hours, a day's refresh), without reading the GPU hours no job holds.
    op.create_index(
        "ix_gpu_hour_rollups_job",
        "gpu_hour_rollups",
        ["workspace_id", "job_id"],
        unique=False,
        postgresql_where=sa.text("job_id IS NOT NULL"),
    )
    op.create_index(
        "ix_gpu_hour_rollups_job_hour",
        "gpu_hour_rollups",
        ["workspace_id", "hour_start"],
        unique=False,
        postgresql_where=sa.text("job_id IS NOT NULL"),
    )
    op.execute(MOVE_WHOLE_HOURS)
    op.execute(JOB_HOURS)
    op.execute(MARK_DIRTY)
    for event, referencing in EVENTS:
        op.execute(
            f"CREATE TRIGGER gpu_hour_rollups_mark_job_days_{event} AFTER {event.upper()} "
            f"ON gpu_hour_rollups REFERENCING {referencing} FOR EACH STATEMENT "
            "EXECUTE FUNCTION job_rides_mark_dirty()"
        )


def downgrade() -> None:
    for event, _ in EVENTS:
        op.execute(
            f"DROP TRIGGER IF EXISTS gpu_hour_rollups_mark_job_days_{event} ON gpu_hour_rollups"
        )
    op.execute("DROP FUNCTION IF EXISTS job_rides_mark_dirty()")
    op.execute("DROP VIEW IF EXISTS job_hours")
    # The hours on GPU rows go back to figure rows before their columns go.
    op.execute(
        f"""
        INSERT INTO job_hour_figures AS f (workspace_id, job_id, gpu_id, hour_start, host_id,
            {_COLUMNS}, max_memory_used_mb)
        SELECT r.workspace_id, r.job_id, r.gpu_id, r.hour_start, r.host_id,
               {", ".join(f"r.job_{c}" for c in SUMS)}, r.job_max_memory_used_mb
        FROM gpu_hour_rollups r
        JOIN scheduler_jobs j ON j.workspace_id = r.workspace_id AND j.id = r.job_id
        WHERE r.job_id IS NOT NULL
        ON CONFLICT (workspace_id, job_id, gpu_id, hour_start) DO UPDATE SET
            {", ".join(f"{c} = f.{c} + EXCLUDED.{c}" for c in SUMS)},
            max_memory_used_mb = GREATEST(f.max_memory_used_mb, EXCLUDED.max_memory_used_mb)
        """
    )
    op.drop_index("ix_gpu_hour_rollups_job_hour", table_name="gpu_hour_rollups")
    op.drop_index("ix_gpu_hour_rollups_job", table_name="gpu_hour_rollups")
    for name in ("job_max_memory_used_mb", *(f"job_{c}" for c in SUMS), "job_id"):
        op.drop_column("gpu_hour_rollups", name)
