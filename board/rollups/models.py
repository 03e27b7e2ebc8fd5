"""Hourly rollups, kept current in the ingest transaction.

Durations are integer microseconds, so crediting and un-crediting an interval are
exact inverses and the totals do not depend on arrival order.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Index, Integer, PrimaryKeyConstraint, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base

# Ingest updates an hour's rows about 120 times: room on each page keeps those updates
# HOT, with no new index entries (migration "fillfactor for updated rows").
UPDATED_IN_PLACE = {"fillfactor": 80}


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
    # Energy (board.rollups.crediting.GPU_COLUMNS): 0 for hours credited before it.
    energy_covered_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    active_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")
    idle_held_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")
    idle_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")
    # Booked time, when the hour lies wholly inside one booking of this GPU (at most one:
    # bookings of a GPU never overlap): how it was spent, as reservation_hour_figures
    # counts a booking's partial hours (board.reservations.crediting).
    booked_covered_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    booked_used_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    booked_idle_held_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    booked_conflict_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    booked_unused_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    # A scheduler job run's figures for this hour, when the hour lies wholly inside the
    # run and no other run of the GPU touches it (board.jobs.crediting); `job_id` the
    # run (scheduler_jobs.id), NULL for none. Partial and shared hours are kept in
    # job_hour_figures; the view job_hours reads both.
    job_id: Mapped[int | None] = mapped_column(BigInteger)
    job_covered_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    job_active_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    job_idle_held_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    job_foreign_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    job_unused_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    job_util_pct_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    job_max_memory_used_mb: Mapped[int] = mapped_column(Integer, server_default="0")

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "gpu_id", "hour_start"),
        Index("ix_gpu_hour_rollups_workspace_hour", "workspace_id", "hour_start"),
        Index(
            "ix_gpu_hour_rollups_job",
            "workspace_id",
            "job_id",
            postgresql_where=text("job_id IS NOT NULL"),
        ),
        Index(
            "ix_gpu_hour_rollups_job_hour",
            "workspace_id",
            "hour_start",
            postgresql_where=text("job_id IS NOT NULL"),
        ),
        {"postgresql_with": UPDATED_IN_PLACE},
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
    # The user's share of the energy (board.rollups.crediting.USER_COLUMNS).
    energy_held_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    active_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")
    idle_held_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "gpu_id", "linux_user", "hour_start"),
        Index("ix_user_hour_rollups_workspace_hour", "workspace_id", "hour_start"),
        {"postgresql_with": UPDATED_IN_PLACE},
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
    # Energy (board.rollups.crediting.GPU_COLUMNS): 0 for hours credited before it.
    energy_covered_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    active_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")
    idle_held_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")
    idle_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "host_id", "hour_start"),
        Index("ix_host_hour_rollups_workspace_hour", "workspace_id", "hour_start"),
        {"postgresql_with": UPDATED_IN_PLACE},
    )
