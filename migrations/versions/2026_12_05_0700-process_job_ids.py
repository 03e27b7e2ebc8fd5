"""process job ids: the scheduler job each process ran in, as its agent named it

Our agent reads a process's Slurm job from its cgroup and sends it as `jobId` (the
released agent never does). `host_observations.process_job_id` keeps it, one element per
process, parallel to the other process arrays: NULL as a whole when no process of the
observation named a job (every observation before this and every one of the released
agent), a NULL element for a process that named none. The compacted hours' record type
gains the same attribute (records compacted before read it as NULL), and
raw_observations(…) returns it. The crediting uses it where an allocation alone cannot
say whose a process is (board.jobs.crediting, docs/jobs.md).

Revision ID: 052b16632050
Revises: 1cf2e86765cf
Create Date: 2026-12-05 07:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "052b16632050"
down_revision: str | None = "1cf2e86765cf"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FIELDS = (
    "observed_at, received_at, collection_status, errors, agent_version, driver_version, "
    "gpu_id, gpu_index, gpu_util_pct, gpu_memory_used_mb, gpu_memory_total_mb, "
    "gpu_temperature_c, gpu_power_w, gpu_reported_state, gpu_state, process_gpu_id, "
    "process_pid, process_user, process_name, process_type, process_memory_mb"
)


def _reader(fields: str) -> str:
    o_fields = ", ".join(f"o.{f.strip()}" for f in fields.split(","))
    return f"""
CREATE OR REPLACE FUNCTION raw_observations(ws bigint, host bigint, lo timestamptz,
                                            hi timestamptz)
RETURNS SETOF observation_record LANGUAGE sql STABLE AS $$
    SELECT {o_fields}
    FROM host_observations o
    WHERE o.workspace_id = ws AND o.host_id = host AND o.observed_at >= lo AND o.observed_at <= hi
    UNION ALL
    SELECT r.*
    FROM observation_hours c CROSS JOIN LATERAL unnest(c.records) r
    WHERE c.workspace_id = ws AND c.host_id = host
      AND c.hour_start > lo - interval '1 hour' AND c.hour_start <= hi
      AND c.last_at >= lo AND c.first_at <= hi
      AND r.observed_at >= lo AND r.observed_at <= hi
$$
"""


def upgrade() -> None:
    op.execute("ALTER TABLE host_observations ADD COLUMN process_job_id text[]")
    op.execute("ALTER TYPE observation_record ADD ATTRIBUTE process_job_id text[]")
    op.execute(_reader(_FIELDS + ", process_job_id"))


def downgrade() -> None:
    op.execute("ALTER TYPE observation_record DROP ATTRIBUTE process_job_id")
    op.execute(_reader(_FIELDS))
    op.execute("ALTER TABLE host_observations DROP COLUMN process_job_id")
