"""notices

Episodes of the conditions told (idle-held GPUs, idle bookings, stale or failing hosts),
the channels they go to, the outbox of events with one delivery row per channel or
person, snoozes, the daily digests sent; and the workspace settings
idleHeldNoticeMinutes, reservationIdleNoticeMinutes and digestHour.

Revision ID: a16f3c6d9e06
Revises: a17e2b5c8f05
Create Date: 2026-12-03 17:05:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "a16f3c6d9e06"
down_revision: str | None = "a17e2b5c8f05"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _now() -> sa.sql.elements.TextClause:
    return sa.text("now()")


def upgrade() -> None:
    op.add_column(
        "workspaces",
        sa.Column("idle_held_notice_minutes", sa.Integer(), server_default="30", nullable=False),
    )
    op.add_column(
        "workspaces",
        sa.Column(
            "reservation_idle_notice_minutes", sa.Integer(), server_default="30", nullable=False
        ),
    )
    op.add_column("workspaces", sa.Column("digest_hour", sa.Integer(), nullable=True))
    op.create_check_constraint(
        "idle_notice_range", "workspaces", "idle_held_notice_minutes BETWEEN 1 AND 10080"
    )
    op.create_check_constraint(
        "reservation_notice_range",
        "workspaces",
        "reservation_idle_notice_minutes BETWEEN 1 AND 10080",
    )
    op.create_check_constraint("digest_hour_range", "workspaces", "digest_hour BETWEEN 0 AND 23")

    op.create_table(
        "notice_channels",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("public_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("sealed_url", sa.LargeBinary(), nullable=True),
        sa.Column("sealed_secret", sa.LargeBinary(), nullable=True),
        sa.Column("emails", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("events", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("kind IN ('webhook', 'slack', 'email')", name="kind_known"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id", "id"),
        sa.UniqueConstraint("public_id"),
    )
    op.create_table(
        "notice_episodes",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("gpu_id", sa.BigInteger(), nullable=True),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("absent_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notified", sa.Boolean(), nullable=False),
        sa.Column("data", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["workspace_id", "host_id"], ["hosts.workspace_id", "hosts.id"], ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("workspace_id", "id"),
    )
    # One open episode per subject: what makes a second process or a restart find it.
    op.create_index(
        "uq_notice_episodes_open_subject",
        "notice_episodes",
        ["workspace_id", "kind", "subject"],
        unique=True,
        postgresql_where=sa.text("closed_at IS NULL"),
    )
    op.create_table(
        "notice_events",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("body", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("gpu_id", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_notice_events_workspace_id", "notice_events", ["workspace_id"])
    op.create_table(
        "notice_deliveries",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("channel_id", sa.BigInteger(), nullable=True),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("recipient", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "next_attempt_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False
        ),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_now(), nullable=False),
        sa.CheckConstraint(
            "status IN ('pending', 'sending', 'delivered', 'failed')", name="status_known"
        ),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["event_id"], ["notice_events.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id", "id"),
        sa.UniqueConstraint("event_id", "kind", "recipient"),
    )
    # What the delivery workers poll: only rows still to send.
    op.create_index(
        "ix_notice_deliveries_due",
        "notice_deliveries",
        ["next_attempt_at"],
        postgresql_where=sa.text("status IN ('pending', 'sending')"),
    )
    op.create_table(
        "notice_snoozes",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("gpu_id", sa.BigInteger(), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id", "gpu_id"),
    )
    op.create_table(
        "notice_digests",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id", "day"),
    )


def downgrade() -> None:
    op.drop_table("notice_digests")
    op.drop_table("notice_snoozes")
    op.drop_index("ix_notice_deliveries_due", table_name="notice_deliveries")
    op.drop_table("notice_deliveries")
    op.drop_index("ix_notice_events_workspace_id", table_name="notice_events")
    op.drop_table("notice_events")
    op.drop_index("uq_notice_episodes_open_subject", table_name="notice_episodes")
    op.drop_table("notice_episodes")
    op.drop_table("notice_channels")
    op.drop_constraint("ck_workspaces_digest_hour_range", "workspaces", type_="check")
    op.drop_constraint("ck_workspaces_reservation_notice_range", "workspaces", type_="check")
    op.drop_constraint("ck_workspaces_idle_notice_range", "workspaces", type_="check")
    op.drop_column("workspaces", "digest_hour")
    op.drop_column("workspaces", "reservation_idle_notice_minutes")
    op.drop_column("workspaces", "idle_held_notice_minutes")
