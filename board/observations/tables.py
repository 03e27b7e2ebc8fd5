"""The raw history: one row per observation, range-partitioned on time, one partition a day.

Hot rows (`host_observations`): the observation's own fields and its GPUs and processes
as typed arrays, parallel by position (gpu_id[i], gpu_util_pct[i], …; process_gpu_id[j],
process_pid[j], …): one row and one index entry per push instead of one per GPU and per
process. Closed days are compacted by board.observations.compaction into
`observation_hours`, one row per host and hour holding that hour's observations as an
array of the composite type `observation_record` (the same fields), which TOAST
compresses (lz4 where the server has it). That table, the type, the readers'
`raw_observations(…)` functions and the `gpu_samples`/`process_samples` views are made
by the migration "compact raw history" and are not in this metadata: SQLAlchemy cannot
reflect a composite type (migrations/env.py leaves them out of `alembic check`).

Keys lead with workspace_id and carry observed_at: Postgres requires the partition
column in every unique key, and a later scale-out by tenant needs workspace_id first.
Partition children are created and dropped by board.observations, never by migrations
(the one that converted the old per-sample tables excepted).
"""

from __future__ import annotations

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Column,
    DateTime,
    Integer,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
)

from board.db.base import Base

# Relations the migration "compact raw history" makes outside this metadata (a
# composite type, functions and views), owned here like the table above
# (tests/test_layers.py reads this to know who may name them in SQL).
OWNED_RELATIONS = (
    "observation_hours",
    "observation_record",
    "raw_observations",
    "gpu_samples",
    "process_samples",
)

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
    # One element per GPU, in the order the agent sent them.
    Column("gpu_id", ARRAY(BigInteger), nullable=False),
    Column("gpu_index", ARRAY(SmallInteger), nullable=False),
    Column("gpu_util_pct", ARRAY(SmallInteger), nullable=False),
    Column("gpu_memory_used_mb", ARRAY(Integer), nullable=False),
    Column("gpu_memory_total_mb", ARRAY(Integer), nullable=False),
    Column("gpu_temperature_c", ARRAY(SmallInteger), nullable=False),  # null elements
    Column("gpu_power_w", ARRAY(Integer), nullable=False),  # null elements
    # What the agent sent (null for agents before 1.4.0) and the state the board counts.
    Column("gpu_reported_state", ARRAY(Text), nullable=False),
    Column("gpu_state", ARRAY(Text), nullable=False),
    # One element per process; process_gpu_id says whose GPU it runs on.
    Column("process_gpu_id", ARRAY(BigInteger), nullable=False),
    Column("process_pid", ARRAY(Integer), nullable=False),
    Column("process_user", ARRAY(Text), nullable=False),
    Column("process_name", ARRAY(Text), nullable=False),
    Column("process_type", ARRAY(Text), nullable=False),
    Column("process_memory_mb", ARRAY(BigInteger), nullable=False),  # null elements
    # The scheduler job each process ran in (our agent's jobId): NULL when no process of
    # the observation named one, a null element for a process that named none.
    Column("process_job_id", ARRAY(Text)),
    PrimaryKeyConstraint("workspace_id", "host_id", "observed_at"),
    postgresql_partition_by="RANGE (observed_at)",
)
