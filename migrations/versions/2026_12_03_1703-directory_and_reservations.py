"""directory and reservations

The directory of Linux users (who and which team they are), reservations of GPUs with
an exclusion constraint per GPU, the figures credited against each reservation, and the
workspace setting maxReservationDays.

Revision ID: a15c9e1a7d04
Revises: a14b3f8d6e03
Create Date: 2026-12-03 17:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "a15c9e1a7d04"
down_revision: str | None = "a14b3f8d6e03"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "workspaces",
        sa.Column("max_reservation_days", sa.Integer(), server_default="14", nullable=False),
    )
    op.create_check_constraint(
        "max_reservation_days_range", "workspaces", "max_reservation_days BETWEEN 1 AND 366"
    )
    op.create_table(
        "directory_entries",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("linux_user", sa.Text(), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=True),
        sa.Column("team", sa.Text(), nullable=True),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint("length(linux_user) BETWEEN 1 AND 64", name="linux_user_length"),
        sa.CheckConstraint("team IS NULL OR length(team) BETWEEN 1 AND 100", name="team_length"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["workspace_id", "user_id"],
            ["memberships.workspace_id", "memberships.user_id"],
            ondelete="SET NULL (user_id)",
        ),
        sa.PrimaryKeyConstraint("workspace_id", "linux_user"),
    )
    op.create_table(
        "reservations",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("public_id", sa.Uuid(), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("linux_users", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("during", postgresql.TSTZRANGE(), nullable=False),
        sa.Column("note", sa.Text(), server_default="", nullable=False),
        sa.Column("created_by", sa.BigInteger(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "NOT isempty(during) AND lower_inc(during) AND NOT upper_inc(during) "
            "AND NOT lower_inf(during) AND NOT upper_inf(during)",
            name="during_bounded",
        ),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["workspace_id", "host_id"], ["hosts.workspace_id", "hosts.id"], ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id", "id"),
        sa.UniqueConstraint("public_id"),
    )
    op.create_index("ix_reservations_workspace_user", "reservations", ["workspace_id", "user_id"])
    op.create_table(
        "reservation_gpus",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("reservation_id", sa.BigInteger(), nullable=False),
        sa.Column("gpu_id", sa.BigInteger(), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("during", postgresql.TSTZRANGE(), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id", "reservation_id"],
            ["reservations.workspace_id", "reservations.id"],
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id", "gpu_id"], ["gpus.workspace_id", "gpus.id"], ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("workspace_id", "reservation_id", "gpu_id"),
        # GPU ids are unique across workspaces: one GPU is the one-point range
        # [gpu_id, gpu_id], so GiST needs no btree_gist (the embedded server lacks it).
        postgresql.ExcludeConstraint(
            (sa.text("int8range(gpu_id, gpu_id, '[]')"), "&&"),
            (sa.column("during"), "&&"),
            name="no_overlap",
            using="gist",
        ),
    )
    op.create_index("ix_reservation_gpus_host", "reservation_gpus", ["workspace_id", "host_id"])
    op.create_table(
        "reservation_hour_figures",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("reservation_id", sa.BigInteger(), nullable=False),
        sa.Column("gpu_id", sa.BigInteger(), nullable=False),
        sa.Column("hour_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("covered_us", sa.BigInteger(), nullable=False),
        sa.Column("used_us", sa.BigInteger(), nullable=False),
        sa.Column("idle_held_us", sa.BigInteger(), nullable=False),
        sa.Column("conflict_us", sa.BigInteger(), nullable=False),
        sa.Column("unused_us", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id", "reservation_id"],
            ["reservations.workspace_id", "reservations.id"],
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workspace_id", "reservation_id", "gpu_id", "hour_start"),
    )
    # A member's secret calendar feed URL (calendar apps send no Authorization header):
    # one per member and workspace, only its SHA-256 kept.
    op.create_table(
        "calendar_feed_tokens",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("token_hash", sa.LargeBinary(), nullable=False),
        sa.Column("token_prefix", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name="fk_calendar_feed_tokens_workspace_id_workspaces",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name="fk_calendar_feed_tokens_user_id_users",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workspace_id", "user_id"),
        sa.UniqueConstraint("token_hash", name="uq_calendar_feed_tokens_token_hash"),
    )


def downgrade() -> None:
    op.drop_table("calendar_feed_tokens")
    op.drop_table("reservation_hour_figures")
    op.drop_index("ix_reservation_gpus_host", table_name="reservation_gpus")
    op.drop_table("reservation_gpus")
    op.drop_index("ix_reservations_workspace_user", table_name="reservations")
    op.drop_table("reservations")
    op.drop_table("directory_entries")
    op.drop_constraint("ck_workspaces_max_reservation_days_range", "workspaces", type_="check")
    op.drop_column("workspaces", "max_reservation_days")
