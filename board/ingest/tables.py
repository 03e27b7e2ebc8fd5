"""The raw history: range-partitioned on observation time, one partition a day.

Keys lead with workspace_id and carry observed_at: Postgres requires the partition
column in every unique key, and a later scale-out by tenant needs workspace_id first.
Partition children are created and dropped by board.partitions, never by migrations.
"""

from __future__ import annotations

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
)

from board.db.base import Base

host_observations = Table(
    "host_observations",
    Base.metadata,
    Column("workspace_id", BigInteger, nullable=False),
    Column("host_id", BigInteger, nullable=False),
    Column("observed_at", DateTime(timezone=True), nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False),
    Column("collection_status", Text, nullable=False),
    Column("errors", ARRAY(Text), nullable=False),
    Column("agent_version", Text, nullable=False),
    Column("driver_version", Text, nullable=False),
    PrimaryKeyConstraint("workspace_id", "host_id", "observed_at"),
    postgresql_partition_by="RANGE (observed_at)",
)

gpu_samples = Table(
    "gpu_samples",
    Base.metadata,
    Column("workspace_id", BigInteger, nullable=False),
    Column("host_id", BigInteger, nullable=False),
    Column("observed_at", DateTime(timezone=True), nullable=False),
    Column("gpu_id", BigInteger, nullable=False),
    Column("gpu_index", SmallInteger, nullable=False),
    Column("util_pct", SmallInteger, nullable=False),
    Column("memory_used_mb", Integer, nullable=False),
    Column("memory_total_mb", Integer, nullable=False),
    Column("temperature_c", SmallInteger),
    Column("power_w", Integer),
    # What the agent sent (null for agents before 1.4.0) and the state the board counts.
    Column("reported_state", Text),
    Column("state", Text, nullable=False),
    PrimaryKeyConstraint("workspace_id", "host_id", "observed_at", "gpu_id"),
    postgresql_partition_by="RANGE (observed_at)",
)

process_samples = Table(
    "process_samples",
    Base.metadata,
    Column("workspace_id", BigInteger, nullable=False),
    Column("host_id", BigInteger, nullable=False),
    Column("observed_at", DateTime(timezone=True), nullable=False),
    Column("gpu_id", BigInteger, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("linux_user", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("memory_used_mb", BigInteger),
    Index("ix_process_samples_host_time", "workspace_id", "host_id", "observed_at"),
    postgresql_partition_by="RANGE (observed_at)",
)
