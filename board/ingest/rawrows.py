"""A batch's raw rows: one `INSERT … SELECT FROM unnest(…)` of one row per observation.

Each observation's GPUs and processes travel as array literals (board.db.pgtext), one
per column and observation, gathered into one text[] per column for the batch; the
statement casts each back to its typed array. Like the per-sample rows before it, the
statement goes out with the rollup upserts, the host update and the COMMIT in the
batch's last round trip (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from board.db.pgtext import int_array, nullable_int_array, nullable_text_array, text_array
from board.ingest.gpuids import GpuInfo, GpuKey
from board.ingest.normalize import Observation, gpu_state

_INSERT = """
    INSERT INTO host_observations (workspace_id, host_id, observed_at, received_at,
        collection_status, errors, agent_version, driver_version,
        gpu_id, gpu_index, gpu_util_pct, gpu_memory_used_mb, gpu_memory_total_mb,
        gpu_temperature_c, gpu_power_w, gpu_reported_state, gpu_state,
        process_gpu_id, process_pid, process_user, process_name, process_type,
        process_memory_mb, process_job_id)
    SELECT ws, host_id, observed_at, received_at, status, errors::text[], agent_version,
           driver_version, gpu_id::bigint[], gpu_index::smallint[], util::smallint[],
           used::int[], total::int[], temperature::smallint[], power::int[],
           reported::text[], state::text[], p_gpu::bigint[], p_pid::int[], p_user::text[],
           p_name::text[], p_type::text[], p_memory::bigint[], p_job::text[]
    FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[], %s::timestamptz[], %s::text[],
                %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                %s::text[])
         AS o(ws, host_id, observed_at, received_at, status, errors, agent_version,
              driver_version, gpu_id, gpu_index, util, used, total, temperature, power,
              reported, state, p_gpu, p_pid, p_user, p_name, p_type, p_memory, p_job)
"""

_COLUMNS = 24


def observation_row(o: Observation, gpu_ids: dict[GpuKey, GpuInfo]) -> tuple[Any, ...]:
    """One observation's values, its GPU and process arrays as literals."""
    snapshot = o.snapshot
    partial = snapshot.collectionStatus == "partial"
    gpus = snapshot.gpus
    ids = [gpu_ids[(o.host_id, g.uuid)].gpu_id for g in gpus]
    processes = [(gpu_id, p) for gpu_id, g in zip(ids, gpus, strict=True) for p in g.processes]
    return (
        o.workspace_id,
        o.host_id,
        o.observed_at.isoformat(),
        o.received_at.isoformat(),
        snapshot.collectionStatus,
        text_array(snapshot.errors),
        snapshot.host.agentVersion,
        snapshot.host.driverVersion,
        int_array(ids),
        int_array(g.index for g in gpus),
        int_array(g.utilPct for g in gpus),
        int_array(g.memoryUsedMb for g in gpus),
        int_array(g.memoryTotalMb for g in gpus),
        nullable_int_array(g.temperatureC for g in gpus),
        nullable_int_array(g.powerW for g in gpus),
        nullable_text_array(g.usageState for g in gpus),
        text_array(gpu_state(g, partial) for g in gpus),
        int_array(gpu_id for gpu_id, _ in processes),
        int_array(p.pid for _, p in processes),
        text_array(p.linuxUser for _, p in processes),
        text_array(p.name for _, p in processes),
        text_array(p.type or "compute" for _, p in processes),
        nullable_int_array(p.memoryUsedMb for _, p in processes),
        # NULL unless a process names its job (never, from the released agent).
        nullable_text_array(p.jobId for _, p in processes)
        if any(p.jobId is not None for _, p in processes)
        else None,
    )


def observation_params(
    observations: Sequence[Observation], gpu_ids: dict[GpuKey, GpuInfo]
) -> list[str]:
    """The insert's columns: each one array literal over the batch."""
    rows = [observation_row(o, gpu_ids) for o in observations]
    columns = list(zip(*rows, strict=True))
    return [
        int_array(columns[0]),
        int_array(columns[1]),
        *(text_array(columns[i]) for i in range(2, _COLUMNS - 1)),
        nullable_text_array(columns[_COLUMNS - 1]),  # the job ids: NULL when none named
    ]


async def insert_raw(
    conn: psycopg.AsyncConnection[Any],
    observations: Sequence[Observation],
    gpu_ids: dict[GpuKey, GpuInfo],
) -> None:
    """The batch's host_observations rows."""
    await conn.execute(_INSERT, observation_params(observations, gpu_ids))
