"""Who may do what: workspaces (tenants), people, memberships with roles, tokens, sessions.

These tables are what every request's principal is resolved from (board.auth.deps), so
they sit in the kit, below every domain; `board.workspaces` manages them. Web sessions
and failed sign-ins live in PostgreSQL so every board process (and replica) agrees: a
session ended in one process is ended in all of them, and guesses are counted once
however many workers answer them.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base

# scheduler: a bridge on a scheduler's controller (board.jobs): posts job records and
# reads the jobs list, nothing else (no pages, no reports, no fleet).
ROLES = ("admin", "member", "finance", "scheduler")
# The roles that read the workspace's reports and inventory (board.auth.deps.ReaderDep).
READER_ROLES = ("admin", "member", "finance")


class Workspace(Base):
    __tablename__ = "workspaces"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    # Unique through its route (board.auth.routing): a slug is looked up with no workspace
    # known, so its one global index is routing_keys' (docs/operations.md, Citus).
    slug: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    # The value in force now; with the dated history below (board.rollups.gaps): each
    # value holds from its `from` (the first from the beginning, NULL) until the next.
    max_sample_gap_seconds: Mapped[int] = mapped_column(Integer, server_default="120")
    sample_gap_from: Mapped[list[datetime | None]] = mapped_column(
        ARRAY(DateTime(timezone=True)), server_default=text("'{NULL}'")
    )
    sample_gap_seconds: Mapped[list[int]] = mapped_column(
        ARRAY(Integer), server_default=text("'{120}'")
    )
    # Hours before this have rollups without energy that raw samples may still give
    # (a history from before energy): the maintenance rebuilds them from raw, newest day
    # first, moving this back until nothing is left (NULL; board.reservations.rebuild).
    energy_backfill_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    stale_after_seconds: Mapped[int] = mapped_column(Integer, server_default="90")
    timezone: Mapped[str] = mapped_column(Text, server_default="UTC")
    # How long hourly rollups are kept; raw samples follow the server-wide raw retention.
    retention_days: Mapped[int] = mapped_column(Integer, server_default="400")
    # A host reporting more distinct GPU UUIDs than this has its push refused (a broken or
    # hostile agent must not create unbounded GPU rows).
    max_gpus_per_host: Mapped[int] = mapped_column(Integer, server_default="64")
    # The longest booking of GPUs a member may make (board/reservations).
    max_reservation_days: Mapped[int] = mapped_column(Integer, server_default="14")
    # Notices (board/notices): how long a GPU is idle-held, or a booked GPU idle, before
    # it is told; the local hour of the daily digest (null: no digest).
    idle_held_notice_minutes: Mapped[int] = mapped_column(Integer, server_default="30")
    reservation_idle_notice_minutes: Mapped[int] = mapped_column(Integer, server_default="30")
    digest_hour: Mapped[int | None] = mapped_column(Integer)
    # Fleet health (board/health): a GPU at or above this temperature is hot.
    hot_temperature_c: Mapped[int] = mapped_column(Integer, server_default="85")
    # Scheduler jobs (board/notices/job_detect.py): how long a job's allocated GPU sits
    # unused or idle-held before its user is told, and before the account's contacts and
    # the admins are.
    job_idle_notice_minutes: Mapped[int] = mapped_column(Integer, server_default="60")
    job_idle_escalate_minutes: Mapped[int] = mapped_column(Integer, server_default="105")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        CheckConstraint("slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'", name="slug_format"),
        CheckConstraint("max_sample_gap_seconds BETWEEN 1 AND 86400", name="max_gap_range"),
        CheckConstraint(
            "cardinality(sample_gap_seconds) BETWEEN 1 AND 200 "
            "AND cardinality(sample_gap_from) = cardinality(sample_gap_seconds) "
            "AND sample_gap_from[1] IS NULL "
            "AND 1 <= ALL (sample_gap_seconds) AND 86400 >= ALL (sample_gap_seconds) "
            "AND max_sample_gap_seconds = sample_gap_seconds[cardinality(sample_gap_seconds)]",
            name="sample_gap_history",
        ),
        CheckConstraint("stale_after_seconds BETWEEN 1 AND 86400", name="stale_after_range"),
        CheckConstraint("retention_days BETWEEN 1 AND 3650", name="retention_range"),
        CheckConstraint("max_gpus_per_host BETWEEN 1 AND 4096", name="max_gpus_per_host_range"),
        CheckConstraint(
            "max_reservation_days BETWEEN 1 AND 366", name="max_reservation_days_range"
        ),
        CheckConstraint("idle_held_notice_minutes BETWEEN 1 AND 10080", name="idle_notice_range"),
        CheckConstraint(
            "reservation_idle_notice_minutes BETWEEN 1 AND 10080", name="reservation_notice_range"
        ),
        CheckConstraint("digest_hour BETWEEN 0 AND 23", name="digest_hour_range"),
        CheckConstraint("hot_temperature_c BETWEEN 30 AND 120", name="hot_temperature_range"),
        CheckConstraint(
            "job_idle_notice_minutes BETWEEN 1 AND 10080 "
            "AND job_idle_escalate_minutes BETWEEN 2 AND 10080 "
            "AND job_idle_escalate_minutes > job_idle_notice_minutes",
            name="job_idle_notice_range",
        ),
    )


class User(Base):
    """A person; global, so one person can belong to several workspaces."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    email: Mapped[str] = mapped_column(Text, unique=True)
    password_hash: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (CheckConstraint("email = lower(email)", name="email_lowercase"),)


class Membership(Base):
    __tablename__ = "memberships"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    user_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("users.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "user_id"),
        CheckConstraint("role IN ('admin', 'member', 'finance', 'scheduler')", name="role_known"),
    )


class ApiToken(Base):
    """A personal API token (gua_pat_…), scoped to one membership; only its SHA-256 is kept."""

    __tablename__ = "api_tokens"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    id: Mapped[int] = mapped_column(BigInteger, Identity())
    user_id: Mapped[int] = mapped_column(BigInteger)
    # Globally unique through its route (board.auth.routing), not an index of its own.
    token_hash: Mapped[bytes] = mapped_column(LargeBinary)
    token_prefix: Mapped[str] = mapped_column(Text)
    # What the person called it ("laptop CLI"); optional.
    name: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # None: until revoked.
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "id"),
        UniqueConstraint("workspace_id", "token_hash"),
        ForeignKeyConstraint(
            ["workspace_id", "user_id"],
            ["memberships.workspace_id", "memberships.user_id"],
            ondelete="CASCADE",
        ),
    )


class WebSessionRow(Base):
    """A signed-in browser session; the cookie carries a secret whose SHA-256 is kept here."""

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    token_hash: Mapped[bytes] = mapped_column(LargeBinary, unique=True)
    user_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class SignInFailure(Base):
    """Failed sign-ins per key (email and address, or address alone) in a fixed window."""

    __tablename__ = "signin_failures"

    key_hash: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    window_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    failures: Mapped[int] = mapped_column(Integer)


class RoutingKey(Base):
    """A global secret or public id → the one workspace it belongs to (board.auth.routing).

    The one table that keeps such keys unique across workspaces: the tenant tables hold
    them unique within their workspace only, as a cluster distributed by `workspace_id`
    requires (docs/operations.md, "Past one database: Citus"). Written in the transaction
    that writes the row it routes; small and global (a reference table there).
    """

    __tablename__ = "routing_keys"

    kind: Mapped[str] = mapped_column(Text)
    key: Mapped[bytes] = mapped_column(LargeBinary)
    workspace_id: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        PrimaryKeyConstraint("kind", "key"),
        CheckConstraint(
            "kind IN ('agent_token', 'api_token', 'enrollment_token', 'calendar_feed_token', "
            "'workspace_slug')",
            name="kind_known",
        ),
        CheckConstraint("octet_length(key) BETWEEN 1 AND 64", name="key_bounded"),
    )
