"""fleet health: hosts' maintenance windows, retired GPUs, the workspace's hot temperature

A GPU at or above `hot_temperature_c` (85 by default) for five minutes is told as
`gpu.hot`; a host inside one of its maintenance windows raises no notice; a GPU an admin
retired no longer counts as missing (board/health, docs/notices.md).

Revision ID: 5f0557e61b7b
Revises: a29e1e7c0b01
Create Date: 2026-12-04 22:01:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5f0557e61b7b"
down_revision: str | None = "a29e1e7c0b01"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "workspaces",
        sa.Column("hot_temperature_c", sa.Integer(), server_default="85", nullable=False),
    )
    op.create_check_constraint(
        "hot_temperature_range", "workspaces", "hot_temperature_c BETWEEN 30 AND 120"
    )
    op.create_table(
        "host_maintenance_windows",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("public_id", sa.Uuid(), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recurrence", sa.Text(), server_default="none", nullable=False),
        sa.Column("zone", sa.Text(), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("note", sa.Text(), server_default="", nullable=False),
        sa.Column("created_by", sa.BigInteger(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint("ends_at > starts_at", name="ends_after_start"),
        sa.CheckConstraint("recurrence IN ('none', 'daily', 'weekly')", name="recurrence_known"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["workspace_id", "host_id"], ["hosts.workspace_id", "hosts.id"], ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("workspace_id", "id"),
        sa.UniqueConstraint("public_id"),
    )
    op.create_index(
        "ix_host_maintenance_windows_host",
        "host_maintenance_windows",
        ["workspace_id", "host_id"],
    )
    op.create_table(
        "gpu_retirements",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("gpu_id", sa.BigInteger(), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retired_by", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["workspace_id", "gpu_id"], ["gpus.workspace_id", "gpus.id"], ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("workspace_id", "gpu_id"),
    )


def downgrade() -> None:
    op.drop_table("gpu_retirements")
    op.drop_index("ix_host_maintenance_windows_host", table_name="host_maintenance_windows")
    op.drop_table("host_maintenance_windows")
    op.drop_constraint(op.f("ck_workspaces_hot_temperature_range"), "workspaces", type_="check")
    op.drop_column("workspaces", "hot_temperature_c")
