"""Reservations: bookings of GPUs, and the figures credited against each of them."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    ARRAY,
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    LargeBinary,
    PrimaryKeyConstraint,
    Text,
    UniqueConstraint,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import TSTZRANGE, ExcludeConstraint, Range
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base


class Reservation(Base):
    """A member's booking of some GPUs of one host for [start, end)."""

    __tablename__ = "reservations"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity())
    public_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    host_id: Mapped[int] = mapped_column(BigInteger)
    # The reserver; a person, not a membership, so the history outlives a removal.
    user_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("users.id", ondelete="CASCADE"))
    # The Linux accounts that count as the reserver, copied when the booking was made.
    linux_users: Mapped[list[str]] = mapped_column(ARRAY(Text))
    during: Mapped[Range[datetime]] = mapped_column(TSTZRANGE)
    note: Mapped[str] = mapped_column(Text, server_default="")
    created_by: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "id"),
        UniqueConstraint("workspace_id", "public_id"),
        ForeignKeyConstraint(
            ["workspace_id", "host_id"], ["hosts.workspace_id", "hosts.id"], ondelete="CASCADE"
        ),
        CheckConstraint(
            "NOT isempty(during) AND lower_inc(during) AND NOT upper_inc(during) "
            "AND NOT lower_inf(during) AND NOT upper_inf(during)",
            name="during_bounded",
        ),
        Index("ix_reservations_workspace_user", "workspace_id", "user_id"),
        # Lists and reports of a window skip the bookings that ended before it.
        Index("ix_reservations_workspace_end", "workspace_id", text("upper(during)")),
    )


class ReservationGpu(Base):
    """One GPU of a booking; PostgreSQL itself keeps two bookings of a GPU from overlapping."""

    __tablename__ = "reservation_gpus"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    reservation_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    host_id: Mapped[int] = mapped_column(BigInteger)
    # The booking's range, copied here so the exclusion constraint can see it.
    during: Mapped[Range[datetime]] = mapped_column(TSTZRANGE)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "reservation_id", "gpu_id"),
        ForeignKeyConstraint(
            ["workspace_id", "reservation_id"],
            ["reservations.workspace_id", "reservations.id"],
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["workspace_id", "gpu_id"], ["gpus.workspace_id", "gpus.id"], ondelete="CASCADE"
        ),
        # GPU ids are unique across workspaces, so "same GPU" is "the one-point ranges
        # [gpu_id, gpu_id] overlap": GiST handles ranges itself, with no btree_gist
        # extension (which the embedded PostgreSQL does not ship).
        ExcludeConstraint(
            (text("int8range(gpu_id, gpu_id, '[]')"), "&&"),
            ("during", "&&"),
            name="no_overlap",
            using="gist",
        ),
        # What the ingest path asks: the bookings of these hosts that end after its
        # points (a handful, however many ended before), then their ranges.
        Index("ix_reservation_gpus_host_end", "workspace_id", "host_id", text("upper(during)")),
    )


class ReservationHourFigure(Base):
    """Per booking, GPU and UTC hour: how the booked time was spent (integer µs)."""

    __tablename__ = "reservation_hour_figures"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    reservation_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    hour_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    covered_us: Mapped[int] = mapped_column(BigInteger)
    used_us: Mapped[int] = mapped_column(BigInteger)
    idle_held_us: Mapped[int] = mapped_column(BigInteger)
    conflict_us: Mapped[int] = mapped_column(BigInteger)
    unused_us: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "reservation_id", "gpu_id", "hour_start"),
        ForeignKeyConstraint(
            ["workspace_id", "reservation_id"],
            ["reservations.workspace_id", "reservations.id"],
            ondelete="CASCADE",
        ),
    )


class CalendarFeedToken(Base):
    """A member's secret calendar feed URL: only its SHA-256 is kept (one per workspace)."""

    __tablename__ = "calendar_feed_tokens"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    # A feed URL names no workspace: routed by the hash (board.auth.routing).
    token_hash: Mapped[bytes] = mapped_column(LargeBinary)
    token_prefix: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (UniqueConstraint("workspace_id", "token_hash"),)
