"""Notices: the workspace's channels, episodes of a condition, the outbox of events and
their deliveries, snoozes and the daily digests sent (docs/notices.md)."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    CheckConstraint,
    Date,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    Text,
    UniqueConstraint,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base


class NoticeChannel(Base):
    """Where a workspace's notices go: a signed webhook, a Slack incoming webhook, or mail.

    Secrets (a webhook's signing secret, a Slack URL, which is its own credential) are
    kept sealed with a key derived from the board's secret key (board.notices.sealing).
    """

    __tablename__ = "notice_channels"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity())
    public_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    kind: Mapped[str] = mapped_column(Text)
    # A webhook's URL in clear (admins see where it goes); a Slack URL only sealed.
    url: Mapped[str | None] = mapped_column(Text)
    sealed_url: Mapped[bytes | None] = mapped_column(LargeBinary)
    sealed_secret: Mapped[bytes | None] = mapped_column(LargeBinary)
    emails: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default="{}")
    events: Mapped[list[str]] = mapped_column(ARRAY(Text))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # Removed channels stay, so their deliveries can still be listed.
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "id"),
        UniqueConstraint("workspace_id", "public_id"),
        CheckConstraint("kind IN ('webhook', 'slack', 'email')", name="kind_known"),
    )


class NoticeEpisode(Base):
    """One run of a condition (a GPU idle-held, a booking idle, a host stale or in error).

    At most one open episode per subject (partial unique index): two board processes, or
    one restarted, find the open row instead of opening another.
    """

    __tablename__ = "notice_episodes"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity())
    kind: Mapped[str] = mapped_column(Text)
    # "gpu:<id>", "reservation:<id>:gpu:<id>" or "host:<id>": what the condition is about.
    subject: Mapped[str] = mapped_column(Text)
    host_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int | None] = mapped_column(BigInteger)
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    opened_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # When the condition was first seen gone; reset when it returns (hysteresis).
    absent_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    closed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # False when the GPU was snoozed at the open: neither the open nor the end is told.
    notified: Mapped[bool] = mapped_column(Boolean)
    # The open notice's data, sent again (with the end) in the .resolved notice.
    data: Mapped[dict[str, Any]] = mapped_column(JSONB)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "id"),
        Index(
            "uq_notice_episodes_open_subject",
            "workspace_id",
            "kind",
            "subject",
            unique=True,
            postgresql_where=text("closed_at IS NULL"),
        ),
        ForeignKeyConstraint(
            ["workspace_id", "host_id"], ["hosts.workspace_id", "hosts.id"], ondelete="CASCADE"
        ),
    )


class NoticeEvent(Base):
    """One notice, written in the transaction that decided it (the outbox).

    Its id is the Standard Webhooks `webhook-id`: the same on every attempt.
    """

    __tablename__ = "notice_events"

    id: Mapped[uuid.UUID] = mapped_column(Uuid)
    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    type: Mapped[str] = mapped_column(Text)
    occurred_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # {"type", "timestamp", "data"}: the webhook body, and what mail and Slack are made of.
    body: Mapped[dict[str, Any]] = mapped_column(JSONB)
    # The GPU a snooze link in this notice would silence (none for hosts and digests).
    gpu_id: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (PrimaryKeyConstraint("workspace_id", "id"),)


class NoticeDelivery(Base):
    """One event to one channel or one person: the unit retried, listed and counted."""

    __tablename__ = "notice_deliveries"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity())
    event_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    channel_id: Mapped[int | None] = mapped_column(BigInteger)
    # webhook, slack or email; `recipient` is the address for mail to a person.
    kind: Mapped[str] = mapped_column(Text)
    recipient: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, server_default="pending")
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    next_attempt_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    # A worker holds a claimed delivery until then; past it, another may take it over.
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    response_status: Mapped[int | None] = mapped_column(Integer)
    # At most 500 characters of the answer or the error, never a secret of ours.
    response: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "id"),
        UniqueConstraint("workspace_id", "event_id", "kind", "recipient"),
        ForeignKeyConstraint(
            ["workspace_id", "event_id"],
            ["notice_events.workspace_id", "notice_events.id"],
            ondelete="CASCADE",
        ),
        CheckConstraint(
            "status IN ('pending', 'sending', 'delivered', 'failed')", name="status_known"
        ),
        Index(
            "ix_notice_deliveries_due",
            "next_attempt_at",
            postgresql_where=text("status IN ('pending', 'sending')"),
        ),
    )


class NoticeSnooze(Base):
    """A GPU whose notices are silenced until `until` (from a signed link)."""

    __tablename__ = "notice_snoozes"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    until: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (PrimaryKeyConstraint("workspace_id", "gpu_id"),)


class NoticeDigest(Base):
    """The daily digest of one workspace and local day: sent once (the key)."""

    __tablename__ = "notice_digests"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    day: Mapped[date] = mapped_column(Date)
    event_id: Mapped[uuid.UUID] = mapped_column(Uuid)

    __table_args__ = (PrimaryKeyConstraint("workspace_id", "day"),)
