"""Fleet health's tables: hosts' maintenance windows and retired GPUs (docs/notices.md)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    PrimaryKeyConstraint,
    Text,
    UniqueConstraint,
    Uuid,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base


class MaintenanceWindow(Base):
    """A host's planned maintenance: once, or every day or week at the same local times.

    `starts_at`/`ends_at` are the first occurrence; a recurring one repeats the wall-clock
    times of that occurrence in `zone` (the workspace's zone when it was made), so a
    window 01:00-05:00 stays 01:00-05:00 across a DST change (board.health.windows).
    """

    __tablename__ = "host_maintenance_windows"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity())
    public_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    host_id: Mapped[int] = mapped_column(BigInteger)
    starts_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ends_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    recurrence: Mapped[str] = mapped_column(Text, server_default="none")
    zone: Mapped[str] = mapped_column(Text)
    # A recurring window's last occurrence starts before this (null: no end).
    until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    note: Mapped[str] = mapped_column(Text, server_default="")
    created_by: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "id"),
        UniqueConstraint("workspace_id", "public_id"),
        ForeignKeyConstraint(
            ["workspace_id", "host_id"], ["hosts.workspace_id", "hosts.id"], ondelete="CASCADE"
        ),
        CheckConstraint("ends_at > starts_at", name="ends_after_start"),
        CheckConstraint("recurrence IN ('none', 'daily', 'weekly')", name="recurrence_known"),
        Index("ix_host_maintenance_windows_host", "workspace_id", "host_id"),
    )


class GpuRetirement(Base):
    """A GPU an admin retired: gone for good, so its absence is no longer "missing".

    It holds while the GPU stays away; a GPU seen again after `retired_at` counts as
    any other (board.health.missing), and its row stays as the record of the retirement.
    """

    __tablename__ = "gpu_retirements"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    retired_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    retired_by: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "gpu_id"),
        ForeignKeyConstraint(
            ["workspace_id", "gpu_id"], ["gpus.workspace_id", "gpus.id"], ondelete="CASCADE"
        ),
    )
