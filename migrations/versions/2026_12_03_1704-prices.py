"""prices

Money (issue 17): one currency per workspace, prices per GPU model valid from a date,
and the view `price_ranges` that reports join to price each rollup hour.

Revision ID: a17e2b5c8f05
Revises: a15c9e1a7d04
Create Date: 2026-12-03 17:04:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a17e2b5c8f05"
down_revision: str | None = "a15c9e1a7d04"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Each price holds from its start until the next start of the same GPU model (or for
# ever). A report joins this view on (workspace, model, hour) to price an hour.
PRICE_RANGES = """
    CREATE VIEW price_ranges AS
    SELECT workspace_id, gpu_model, per_gpu_hour, starts_at,
           coalesce(lead(starts_at) OVER (PARTITION BY workspace_id, gpu_model
                                          ORDER BY starts_at),
                    'infinity'::timestamptz) AS ends_at
    FROM prices
"""


def upgrade() -> None:
    op.create_table(
        "workspace_currencies",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.Column("minor_units", sa.SmallInteger(), nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint("currency ~ '^[A-Z]{3}$'", name="currency_code"),
        sa.CheckConstraint("minor_units BETWEEN 0 AND 4", name="minor_units_range"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id"),
    )
    op.create_table(
        "prices",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("gpu_model", sa.Text(), nullable=False),
        sa.Column("valid_from", sa.Date(), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("zone", sa.Text(), nullable=False),
        sa.Column("per_gpu_hour", sa.Numeric(18, 6), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint("length(gpu_model) BETWEEN 1 AND 100", name="gpu_model_length"),
        sa.CheckConstraint("per_gpu_hour >= 0", name="per_gpu_hour_not_negative"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id", "gpu_model", "valid_from"),
    )
    op.execute(PRICE_RANGES)


def downgrade() -> None:
    op.execute("DROP VIEW price_ranges")
    op.drop_table("prices")
    op.drop_table("workspace_currencies")
