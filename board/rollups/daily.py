"""Daily rollups per UTC day: the hourly rollups summed, so long reports read 24x fewer rows.

They are never written by application code. Statement-level triggers on the hourly
tables (migration "day rollups") add every inserted, updated or deleted hour row's
change to its day row in the same transaction, so a day row always equals the sum of
its hour rows, whatever path changed them (ingest, rebuild, retention). Reports use
them only for whole UTC days inside the window and only when the report's days are
UTC days; everything else reads the hourly rows.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Index, PrimaryKeyConstraint, Text
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base


class GpuDayRollup(Base):
    __tablename__ = "gpu_day_rollups"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    day_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    host_id: Mapped[int] = mapped_column(BigInteger)
    covered_us: Mapped[int] = mapped_column(BigInteger)
    active_us: Mapped[int] = mapped_column(BigInteger)
    idle_held_us: Mapped[int] = mapped_column(BigInteger)
    idle_us: Mapped[int] = mapped_column(BigInteger)
    util_pct_us: Mapped[int] = mapped_column(BigInteger)
    memory_used_mb_us: Mapped[int] = mapped_column(BigInteger)
    memory_total_mb_us: Mapped[int] = mapped_column(BigInteger)
    sample_count: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "gpu_id", "day_start"),
        Index("ix_gpu_day_rollups_workspace_day", "workspace_id", "day_start"),
    )


class UserDayRollup(Base):
    __tablename__ = "user_day_rollups"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    linux_user: Mapped[str] = mapped_column(Text)
    day_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    host_id: Mapped[int] = mapped_column(BigInteger)
    held_us: Mapped[int] = mapped_column(BigInteger)
    active_us: Mapped[int] = mapped_column(BigInteger)
    idle_held_us: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "gpu_id", "linux_user", "day_start"),
        Index("ix_user_day_rollups_workspace_day", "workspace_id", "day_start"),
    )
