"""Hosts, their GPUs and the counters of rejected pushes."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    ARRAY,
    BigInteger,
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
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base


class Host(Base):
    __tablename__ = "hosts"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity())
    # The hostId people and agents see; never the internal key.
    public_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    display_name: Mapped[str] = mapped_column(Text)
    hostname: Mapped[str | None] = mapped_column(Text)
    agent_version: Mapped[str | None] = mapped_column(Text)
    driver_version: Mapped[str | None] = mapped_column(Text)
    # Routed (board.auth.routing): a push names no workspace, its token's route does.
    agent_token_hash: Mapped[bytes] = mapped_column(LargeBinary)
    agent_token_prefix: Mapped[str] = mapped_column(Text)
    enrolled_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The newest observation by observedAt (not by arrival): what the board shows now.
    latest_observed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    latest_received_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    latest_collection_status: Mapped[str | None] = mapped_column(Text)
    latest_errors: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    # What the ingest path needs of the newest observation (normalize.encode_tick); the
    # GPUs and processes people see are read from the raw samples at latest_observed_at.
    latest_tick: Mapped[str | None] = mapped_column(Text)

    # Every push updates its host's row (the newest state): half of each page is left
    # free so the updates stay HOT (migration "fillfactor for updated rows").
    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "id"),
        UniqueConstraint("workspace_id", "public_id"),
        UniqueConstraint("workspace_id", "agent_token_hash"),
        {"postgresql_with": {"fillfactor": 50}},
    )


class Gpu(Base):
    """A card of one host; its UUID is unique within the host only (fake agents all say GPU-0)."""

    __tablename__ = "gpus"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    id: Mapped[int] = mapped_column(BigInteger, Identity())
    host_id: Mapped[int] = mapped_column(BigInteger)
    uuid: Mapped[str] = mapped_column(Text)
    gpu_index: Mapped[int] = mapped_column(Integer)
    # /dev/nvidiaN's N (NVML's minor number), when the agent reports it: what a
    # scheduler's device numbers are matched against (board.jobs).
    minor_number: Mapped[int | None] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(Text)
    memory_total_mb: Mapped[int] = mapped_column(Integer)
    first_seen_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "id"),
        UniqueConstraint("workspace_id", "host_id", "uuid"),
        ForeignKeyConstraint(
            ["workspace_id", "host_id"], ["hosts.workspace_id", "hosts.id"], ondelete="CASCADE"
        ),
        # A scheduler's device number finds its GPU (board.jobs: every ingest batch on a
        # cluster host matches its jobs' devices by this).
        Index(
            "ix_gpus_scheduler_device",
            "workspace_id",
            "host_id",
            text("coalesce(minor_number, gpu_index)"),
        ),
    )


class GpuNameHistory(Base):
    """The names a GPU was reported under before its current one: [since, until) each.

    Hours are priced by the model their GPU was reported as then (board.reports
    .repository.costed_user_source), not by the name it has now: a card whose reported
    name changes (a driver spelling the model differently) does not reprice its past.
    """

    __tablename__ = "gpu_name_history"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(Text)
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    until: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "gpu_id", "until"),
        ForeignKeyConstraint(
            ["workspace_id", "gpu_id"], ["gpus.workspace_id", "gpus.id"], ondelete="CASCADE"
        ),
    )


class HostRejection(Base):
    """Rejected pushes per host, reason and hour, so a broken agent is visible."""

    __tablename__ = "host_rejections"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    host_id: Mapped[int] = mapped_column(BigInteger)
    reason: Mapped[str] = mapped_column(Text)
    hour_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    count: Mapped[int] = mapped_column(BigInteger)
    last_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_detail: Mapped[str] = mapped_column(Text)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "host_id", "reason", "hour_start"),
        ForeignKeyConstraint(
            ["workspace_id", "host_id"], ["hosts.workspace_id", "hosts.id"], ondelete="CASCADE"
        ),
    )
