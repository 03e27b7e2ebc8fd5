"""host latest tick

The newest state stops being a JSONB copy of every GPU and process on the host row,
rewritten (and TOASTed) on every push. The hosts API reads the newest raw samples at
`latest_observed_at` instead, and the row keeps only `latest_tick`: the few numbers
per GPU that the next observation's interval is credited with (normalize.encode_tick).
A host without one (all hosts right after this upgrade) has its tick read from the
raw samples once, by its next push.

Revision ID: 7c1f0b9d2a63
Revises: 4364da0ea18a
Create Date: 2026-12-03 04:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "7c1f0b9d2a63"
down_revision: str | None = "4364da0ea18a"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Downgrade: the old JSONB column, rebuilt from the newest raw samples.
_LATEST_GPUS = """
UPDATE hosts h SET latest_gpus = coalesce((
    SELECT jsonb_agg(jsonb_build_object(
        'gpuId', g.gpu_id, 'uuid', d.uuid, 'index', g.gpu_index, 'name', d.name,
        'usageState', g.state, 'reportedUsageState', g.reported_state,
        'utilPct', g.util_pct, 'memoryUsedMb', g.memory_used_mb,
        'memoryTotalMb', g.memory_total_mb, 'temperatureC', g.temperature_c,
        'powerW', g.power_w,
        'processes', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'pid', p.pid, 'linuxUser', p.linux_user, 'name', p.name, 'type', p.type,
                'memoryUsedMb', p.memory_used_mb) ORDER BY p.pid)
            FROM process_samples p
            WHERE p.workspace_id = g.workspace_id AND p.host_id = g.host_id
              AND p.observed_at = g.observed_at AND p.gpu_id = g.gpu_id), '[]'::jsonb)
    ) ORDER BY g.gpu_index)
    FROM gpu_samples g
    JOIN gpus d ON d.workspace_id = g.workspace_id AND d.id = g.gpu_id
    WHERE g.workspace_id = h.workspace_id AND g.host_id = h.id
      AND g.observed_at = h.latest_observed_at), '[]'::jsonb)
WHERE h.latest_observed_at IS NOT NULL
"""


def upgrade() -> None:
    op.add_column("hosts", sa.Column("latest_tick", sa.Text(), nullable=True))
    op.drop_column("hosts", "latest_gpus")


def downgrade() -> None:
    op.add_column(
        "hosts",
        sa.Column("latest_gpus", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )
    op.execute(_LATEST_GPUS)
    op.drop_column("hosts", "latest_tick")
