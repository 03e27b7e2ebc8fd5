"""gpu day totals: the GPUs' day rollups summed over the workspace's GPUs

`gpu_day_totals` holds gpu_day_rollups summed per UTC day: what a usage report reads for
the GPUs' covered time and energy when it has no GPU or host key (its coverage total,
the per-day rows of a report by day), one row a day instead of one per GPU. Written by
the same refresh as the other day rows (board.rollups.daily), never at ingest; filled
here from the day rows that exist.

Revision ID: b96c7d8e0f16
Revises: a85b6c7d9e05
Create Date: 2026-12-05 05:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b96c7d8e0f16"
down_revision: str | None = "a85b6c7d9e05"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SUMS = (
    "covered_us",
    "active_us",
    "idle_held_us",
    "idle_us",
    "util_pct_us",
    "memory_used_mb_us",
    "memory_total_mb_us",
    "sample_count",
    "energy_covered_us",
    "active_energy_uws",
    "idle_held_energy_uws",
    "idle_energy_uws",
)


def upgrade() -> None:
    op.create_table(
        "gpu_day_totals",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("day_start", sa.DateTime(timezone=True), nullable=False),
        *(sa.Column(column, sa.BigInteger(), nullable=False) for column in SUMS),
        sa.PrimaryKeyConstraint("workspace_id", "day_start", name=op.f("pk_gpu_day_totals")),
    )
    sums = ", ".join(SUMS)
    # The memory and utilization integrals are not summed (0: a later revision drops
    # them): over a large fleet a day of them passes bigint's range.
    unread = ("util_pct_us", "memory_used_mb_us", "memory_total_mb_us", "sample_count")
    summed = ", ".join("0" if column in unread else f"sum({column})" for column in SUMS)
    op.execute(
        f"INSERT INTO gpu_day_totals (workspace_id, day_start, {sums}) "
        f"SELECT workspace_id, day_start, {summed} FROM gpu_day_rollups "
        "GROUP BY workspace_id, day_start"
    )


def downgrade() -> None:
    op.drop_table("gpu_day_totals")
