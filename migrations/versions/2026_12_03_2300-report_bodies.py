"""report bodies

Rendered utilization rows kept per report, key (GPU or host) and block of closed days, as
raw deflate segments (board.reports.bodies), and a version per workspace and UTC day that
the day rollups' refresh bumps (board.rollups.daily): a kept block is sent only while
every UTC day it touches is clean (no mark in rollup_dirty_days) and the versions of
those days add up to the version it was rendered at.

Revision ID: a21c0d7e5b10
Revises: a16f3c6d9e06
Create Date: 2026-12-03 23:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a21c0d7e5b10"
down_revision: str | None = "a16f3c6d9e06"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rollup_day_versions",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("day_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("workspace_id", "day_start", name=op.f("pk_rollup_day_versions")),
    )
    op.create_table(
        "report_bodies",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("report", sa.Text(), nullable=False),
        sa.Column("key_id", sa.BigInteger(), nullable=False),
        sa.Column("unit_lo", sa.Integer(), nullable=False),
        sa.Column("unit_hi", sa.Integer(), nullable=False),
        sa.Column("span_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("span_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("prefix", sa.LargeBinary(), nullable=False),
        sa.Column("deflated", sa.LargeBinary(), nullable=False),
        sa.Column("crc", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("covered_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "workspace_id", "report", "unit_lo", "unit_hi", "key_id", name=op.f("pk_report_bodies")
        ),
    )
    op.create_index(
        "ix_report_bodies_workspace_span",
        "report_bodies",
        ["workspace_id", "span_start"],
        unique=False,
    )
    # Deflated already: TOAST would only try to compress it again.
    op.execute("ALTER TABLE report_bodies ALTER COLUMN deflated SET STORAGE EXTERNAL")


def downgrade() -> None:
    op.drop_index("ix_report_bodies_workspace_span", table_name="report_bodies")
    op.drop_table("report_bodies")
    op.drop_table("rollup_day_versions")
