"""Scheduler jobs (docs/jobs.md): records of what a scheduler allocated, and the figures
credited against each allocated GPU, like a booking's (board.reservations)."""

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
    Integer,
    PrimaryKeyConstraint,
    Text,
    UniqueConstraint,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import TSTZRANGE, Range
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base
from board.rollups.models import UPDATED_IN_PLACE

# job_hours (migration "job hours on GPU rows"): job_hour_figures and the job hours kept
# on GPU-hour rows (gpu_hour_rollups.job_*) as one table of (job, GPU, hour) rows, what
# every reader of hourly job figures sums (board.jobs.crediting says which goes where).
OWNED_RELATIONS = ("job_hours",)


class SchedulerJob(Base):
    """One run of a scheduler's job. Slurm keeps a job's id through a requeue, so a run is
    (cluster, raw id, restart count); a later record of the same run replaces this one."""

    __tablename__ = "scheduler_jobs"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity())
    public_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    cluster: Mapped[str] = mapped_column(Text)
    # The job's own id (squeue's job_id, the prolog's SLURM_JOB_ID): an array task's too.
    raw_job_id: Mapped[str] = mapped_column(Text)
    restart_count: Mapped[int] = mapped_column(Integer, server_default="0")
    # The id people know it by: `123_4` for an array task when a record said so.
    job_id: Mapped[str] = mapped_column(Text)
    linux_user: Mapped[str] = mapped_column(Text)
    account: Mapped[str] = mapped_column(Text, server_default="")
    partition: Mapped[str] = mapped_column(Text, server_default="")
    name: Mapped[str] = mapped_column(Text, server_default="")
    state: Mapped[str] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    recorded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "id"),
        UniqueConstraint("workspace_id", "public_id"),
        UniqueConstraint("workspace_id", "cluster", "raw_job_id", "restart_count"),
        CheckConstraint("ended_at IS NULL OR ended_at >= started_at", name="ends_after_start"),
        Index("ix_scheduler_jobs_workspace_start", "workspace_id", "started_at"),
        Index("ix_scheduler_jobs_workspace_user", "workspace_id", "linux_user"),
    )


class JobGpu(Base):
    """One device a job was allocated on one host, by the scheduler's device number
    (Slurm's GRES IDX). It is matched to the host's GPU when read (its minor number when
    the agent reports one, else its index), so a GPU reported after the record matches."""

    __tablename__ = "job_gpus"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    job_id: Mapped[int] = mapped_column(BigInteger)
    host_id: Mapped[int] = mapped_column(BigInteger)
    device: Mapped[int] = mapped_column(Integer)
    # The job's [startedAt, endedAt) (unbounded above while it runs) and its Linux user,
    # copied here: the ingest path reads them per batch with no join to the runs.
    during: Mapped[Range[datetime]] = mapped_column(TSTZRANGE)
    linux_user: Mapped[str] = mapped_column(Text)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "job_id", "host_id", "device"),
        ForeignKeyConstraint(
            ["workspace_id", "job_id"],
            ["scheduler_jobs.workspace_id", "scheduler_jobs.id"],
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["workspace_id", "host_id"], ["hosts.workspace_id", "hosts.id"], ondelete="CASCADE"
        ),
        CheckConstraint("device >= 0", name="device_not_negative"),
        # What the ingest path asks: the allocations of these hosts that end after its
        # points (like ix_reservation_gpus_host_end).
        Index("ix_job_gpus_host_end", "workspace_id", "host_id", text("upper(during)")),
    )


class ClusterHost(Base):
    """A host some job record named: from `since` on, held time outside any job of its
    holder counts as outsideJobGpuHours there."""

    __tablename__ = "cluster_hosts"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    host_id: Mapped[int] = mapped_column(BigInteger)
    cluster: Mapped[str] = mapped_column(Text)
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "host_id"),
        ForeignKeyConstraint(
            ["workspace_id", "host_id"], ["hosts.workspace_id", "hosts.id"], ondelete="CASCADE"
        ),
    )


class HostAllocationVersion(Base):
    """A host's counter of changes to what ingest reads of its scheduler jobs (its job
    GPUs, its cluster membership, its GPUs' numbers), kept by triggers (migration
    "allocations version"); the ingest writer reads its kept copy again when it moved
    (board.jobs.batch). No foreign keys: ingest moves it when it adds a GPU, and a key
    check would lock the workspace row in every such push. A deleted host's row stays."""

    __tablename__ = "host_allocation_versions"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    host_id: Mapped[int] = mapped_column(BigInteger)
    version: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (PrimaryKeyConstraint("workspace_id", "host_id"),)


class JobHourFigure(Base):
    """Per job, GPU and UTC hour: how the allocated time was spent (integer µs, exact to
    un-credit), the utilization integral, and the most memory seen in use (MiB). An hour
    wholly inside a run that no other run of its GPU touches is kept on the GPU-hour row
    instead (gpu_hour_rollups.job_*); read both through the view job_hours."""

    __tablename__ = "job_hour_figures"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    job_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    hour_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    host_id: Mapped[int] = mapped_column(BigInteger)
    covered_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    active_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    idle_held_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    foreign_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    unused_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    util_pct_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    max_memory_used_mb: Mapped[int] = mapped_column(Integer, server_default="0")

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "job_id", "gpu_id", "hour_start"),
        ForeignKeyConstraint(
            ["workspace_id", "job_id"],
            ["scheduler_jobs.workspace_id", "scheduler_jobs.id"],
            ondelete="CASCADE",
        ),
        Index("ix_job_hour_figures_workspace_hour", "workspace_id", "hour_start"),
        # Updated by every batch like the hourly rollups: room on each page keeps the
        # updates HOT (no new entry in either index).
        {"postgresql_with": UPDATED_IN_PLACE},
    )


class OutsideJobHour(Base):
    """Per GPU of a cluster host, Linux user and UTC hour: the user's share of held time
    with no job of theirs allocated on that GPU (integer µs)."""

    __tablename__ = "outside_job_hours"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    linux_user: Mapped[str] = mapped_column(Text)
    hour_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    host_id: Mapped[int] = mapped_column(BigInteger)
    outside_us: Mapped[int] = mapped_column(BigInteger, server_default="0")

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "gpu_id", "linux_user", "hour_start"),
        Index("ix_outside_job_hours_workspace_hour", "workspace_id", "hour_start"),
        {"postgresql_with": UPDATED_IN_PLACE},
    )


class JobDayFigure(Base):
    """JobHourFigure summed per UTC day (the most memory: the day's maximum), for closed
    days whose hours have not changed since (board.jobs.days): long jobs reports read
    about 24 times fewer rows. Rewritten whole by the refresh, never updated in place."""

    __tablename__ = "job_day_figures"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    job_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    day_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    host_id: Mapped[int] = mapped_column(BigInteger)
    covered_us: Mapped[int] = mapped_column(BigInteger)
    active_us: Mapped[int] = mapped_column(BigInteger)
    idle_held_us: Mapped[int] = mapped_column(BigInteger)
    foreign_us: Mapped[int] = mapped_column(BigInteger)
    unused_us: Mapped[int] = mapped_column(BigInteger)
    util_pct_us: Mapped[int] = mapped_column(BigInteger)
    max_memory_used_mb: Mapped[int] = mapped_column(Integer)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "job_id", "gpu_id", "day_start"),
        ForeignKeyConstraint(
            ["workspace_id", "job_id"],
            ["scheduler_jobs.workspace_id", "scheduler_jobs.id"],
            ondelete="CASCADE",
        ),
        Index("ix_job_day_figures_workspace_day", "workspace_id", "day_start"),
    )


class JobDirtyDay(Base):
    """A UTC day whose job figures changed since its day rows were last computed: marked
    by a statement trigger on job_hour_figures in the changing transaction (migration
    "job day figures"), cleared by board.jobs.days.refresh_job_days."""

    __tablename__ = "job_dirty_days"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    day_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    marked_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=text("now()")
    )

    __table_args__ = (PrimaryKeyConstraint("workspace_id", "day_start"),)
