"""Hourly rollups, kept current in the ingest transaction.

Durations are integer microseconds, so crediting and un-crediting an interval are
exact inverses and the totals do not depend on arrival order.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Index, PrimaryKeyConstraint, Text
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base


class GpuHourRollup(Base):
    __tablename__ = "gpu_hour_rollups"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    hour_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    host_id: Mapped[int] = mapped_column(BigInteger)
    covered_us: Mapped[int] = mapped_column(BigInteger)
    active_us: Mapped[int] = mapped_column(BigInteger)
    idle_held_us: Mapped[int] = mapped_column(BigInteger)
    idle_us: Mapped[int] = mapped_column(BigInteger)
    # Time-weighted sums: utilization percent x microseconds, MiB x microseconds.
    util_pct_us: Mapped[int] = mapped_column(BigInteger)
    memory_used_mb_us: Mapped[int] = mapped_column(BigInteger)
    memory_total_mb_us: Mapped[int] = mapped_column(BigInteger)
    sample_count: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "gpu_id", "hour_start"),
        Index("ix_gpu_hour_rollups_workspace_hour", "workspace_id", "hour_start"),
    )


class UserHourRollup(Base):
    __tablename__ = "user_hour_rollups"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    linux_user: Mapped[str] = mapped_column(Text)
    hour_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    host_id: Mapped[int] = mapped_column(BigInteger)
    held_us: Mapped[int] = mapped_column(BigInteger)
    active_us: Mapped[int] = mapped_column(BigInteger)
    idle_held_us: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "gpu_id", "linux_user", "hour_start"),
        Index("ix_user_hour_rollups_workspace_hour", "workspace_id", "hour_start"),
    )


class HostHourRollup(Base):
    """A host's GPU-hour rows of one hour, summed (the per-host hourly report reads these).

    Kept by a statement-level trigger on gpu_hour_rollups (migration "host hour
    rollups"): every statement that changes GPU hours (ingest's upserts, rebuild,
    retention, a COPY) adds its net change here in the same transaction, so a host hour
    always equals `sum(...) FROM gpu_hour_rollups GROUP BY host_id, hour_start` (rows
    that drop to zero are left until retention or a rebuild deletes them).
    """

    __tablename__ = "host_hour_rollups"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    host_id: Mapped[int] = mapped_column(BigInteger)
    hour_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    covered_us: Mapped[int] = mapped_column(BigInteger)
    active_us: Mapped[int] = mapped_column(BigInteger)
    idle_held_us: Mapped[int] = mapped_column(BigInteger)
    idle_us: Mapped[int] = mapped_column(BigInteger)
    util_pct_us: Mapped[int] = mapped_column(BigInteger)
    memory_used_mb_us: Mapped[int] = mapped_column(BigInteger)
    memory_total_mb_us: Mapped[int] = mapped_column(BigInteger)
    sample_count: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "host_id", "hour_start"),
        Index("ix_host_hour_rollups_workspace_hour", "workspace_id", "hour_start"),
    )
