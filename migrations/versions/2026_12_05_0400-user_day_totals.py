"""user day totals: the users' day rollups summed over GPUs

`user_day_totals` holds user_day_rollups summed per (Linux user, UTC day): the rows a
usage report keyed by user, team or day alone reads for clean whole days, about as many
per day as the workspace has users rather than user-GPU pairs (a 30-day report of 1,000
GPUs read 80,352 rows, and now 600). Written by the same refresh as the other day rows
(board.rollups.daily), so never on the ingest path; filled here from the day rows that
exist.

Revision ID: a85b6c7d9e05
Revises: f74a5b6c8d94
Create Date: 2026-12-05 04:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a85b6c7d9e05"
down_revision: str | None = "f74a5b6c8d94"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SUMS = (
    "held_us",
    "active_us",
    "idle_held_us",
    "energy_held_us",
    "active_energy_uws",
    "idle_held_energy_uws",
)


def upgrade() -> None:
    op.create_table(
        "user_day_totals",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("day_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("linux_user", sa.Text(), nullable=False),
        *(sa.Column(column, sa.BigInteger(), nullable=False) for column in SUMS),
        sa.PrimaryKeyConstraint(
            "workspace_id", "day_start", "linux_user", name=op.f("pk_user_day_totals")
        ),
    )
    sums = ", ".join(SUMS)
    summed = ", ".join(f"sum({column})" for column in SUMS)
    op.execute(
        f"INSERT INTO user_day_totals (workspace_id, day_start, linux_user, {sums}) "
        f"SELECT workspace_id, day_start, linux_user, {summed} FROM user_day_rollups "
        "GROUP BY workspace_id, day_start, linux_user"
    )


def downgrade() -> None:
    op.drop_table("user_day_totals")
