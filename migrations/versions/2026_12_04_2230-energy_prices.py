"""electricity prices and carbon intensity, dated per workspace

Each workspace may date a price per kWh (in its currency) and a carbon intensity (grams
CO2e per kWh), each valid from a date like GPU prices: `starts_at` is that date's
midnight in the workspace's zone when stored. Reports price each rollup hour's energy
with the value in force at the hour's start.

The utilization report's rows gain energy columns, so the bodies kept before them are
dropped here (they are rendered again on the next read; the report key changed too, so
a body kept by a process still running the old code is never sent).

Revision ID: 99145bb5631e
Revises: e81ab5cf36f9
Create Date: 2026-12-04 22:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "99145bb5631e"
down_revision: str | None = "e81ab5cf36f9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _dated(table: str, column: str) -> None:
    op.create_table(
        table,
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("valid_from", sa.Date(), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("zone", sa.Text(), nullable=False),
        sa.Column(column, sa.Numeric(18, 6), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint(f"{column} >= 0", name=f"{column}_not_negative"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id", "valid_from"),
    )


def upgrade() -> None:
    _dated("energy_prices", "per_kwh")
    _dated("carbon_intensities", "grams_per_kwh")
    op.execute("DELETE FROM report_bodies")


def downgrade() -> None:
    op.drop_table("carbon_intensities")
    op.drop_table("energy_prices")
    op.execute("DELETE FROM report_bodies")
