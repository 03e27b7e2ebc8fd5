"""gpu day totals narrowed: only the sums reports read from it

`gpu_day_totals` summed every column of the GPUs' day rows over a whole workspace. A
day's memory integrals (MB × µs) over a fleet pass bigint's range at about 1,300 cards
of 80 GB, so the day refresh failed for a large workspace (found by bench/scale.py at
2,000 GPUs). Reports read only its time and energy (board.reports.repository), so the
utilization, memory and sample sums are dropped.

Revision ID: e4f85916fc02
Revises: 052b16632050
Create Date: 2026-12-05 08:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e4f85916fc02"
down_revision: str | None = "052b16632050"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DROPPED = ("util_pct_us", "memory_used_mb_us", "memory_total_mb_us", "sample_count")


def upgrade() -> None:
    for column in _DROPPED:
        op.drop_column("gpu_day_totals", column)


def downgrade() -> None:
    for column in _DROPPED:
        op.add_column(
            "gpu_day_totals",
            sa.Column(column, sa.BigInteger(), server_default="0", nullable=False),
        )
    op.execute(
        """
        UPDATE gpu_day_totals t SET util_pct_us = s.util_pct_us,
            memory_used_mb_us = s.memory_used_mb_us,
            memory_total_mb_us = s.memory_total_mb_us, sample_count = s.sample_count
        FROM (SELECT workspace_id, day_start, sum(util_pct_us) AS util_pct_us,
                     sum(memory_used_mb_us) AS memory_used_mb_us,
                     sum(memory_total_mb_us) AS memory_total_mb_us,
                     sum(sample_count) AS sample_count
              FROM gpu_day_rollups GROUP BY 1, 2) s
        WHERE t.workspace_id = s.workspace_id AND t.day_start = s.day_start
        """
    )
    for column in _DROPPED:
        op.alter_column("gpu_day_totals", column, server_default=None)
