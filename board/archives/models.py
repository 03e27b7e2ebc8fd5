"""What the board keeps about uploaded raw-history archives and their back-fill."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Date,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    PrimaryKeyConstraint,
    Text,
    false,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base

FULL = "_full"


class ArchiveObject(Base):
    """One stored object: a closed UTC day of a time-series table, or a `_full` table."""

    __tablename__ = "archive_objects"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    host_id: Mapped[int] = mapped_column(BigInteger)
    table_name: Mapped[str] = mapped_column(Text)
    # 'YYYY-MM-DD' or '_full' exactly as the agent names it.
    day: Mapped[str] = mapped_column(Text)
    storage_key: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    row_count: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(Text)
    uploaded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "host_id", "table_name", "day"),
        ForeignKeyConstraint(
            ["workspace_id", "host_id"], ["hosts.workspace_id", "hosts.id"], ondelete="CASCADE"
        ),
        CheckConstraint("day = '_full' OR day ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}$'", name="day_format"),
    )


class ArchiveBackfill(Base):
    """The back-fill of one host-day from its gpu_sample + proc_sample archives.

    status: waiting (an object it needs is not there yet), pending, running, done, failed.
    requested_seq grows with every upload that should (re)run it; run_seq is the request
    a run started from, so an upload during a run queues another run instead of being lost.
    """

    __tablename__ = "archive_backfills"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    host_id: Mapped[int] = mapped_column(BigInteger)
    day: Mapped[date] = mapped_column(Date)
    status: Mapped[str] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)
    requested_seq: Mapped[int] = mapped_column(Integer, server_default="0")
    run_seq: Mapped[int] = mapped_column(Integer, server_default="0")
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    # Set when gpu_device arrives during a run that may have waited for it.
    devices_changed: Mapped[bool] = mapped_column(Boolean, server_default=false())
    requested_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    not_before: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    rows_read: Mapped[int] = mapped_column(BigInteger, server_default="0")
    ticks: Mapped[int] = mapped_column(BigInteger, server_default="0")
    added: Mapped[int] = mapped_column(BigInteger, server_default="0")
    skipped: Mapped[int] = mapped_column(BigInteger, server_default="0")
    skipped_reasons: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    errors: Mapped[int] = mapped_column(BigInteger, server_default="0")
    error_samples: Mapped[list[Any]] = mapped_column(JSONB, server_default="[]")

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "host_id", "day"),
        ForeignKeyConstraint(
            ["workspace_id", "host_id"], ["hosts.workspace_id", "hosts.id"], ondelete="CASCADE"
        ),
        CheckConstraint(
            "status IN ('waiting', 'pending', 'running', 'done', 'failed')", name="status"
        ),
        # The workers' queue: only open jobs are ever scanned.
        Index(
            "ix_archive_backfills_open",
            "requested_at",
            postgresql_where=text("status IN ('pending', 'running')"),
        ),
    )
