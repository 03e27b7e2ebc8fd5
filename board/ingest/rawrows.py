"""A batch's raw rows: one `INSERT … SELECT FROM unnest(…)` per table.

Each column travels as one array literal (board.db.pgtext). Unlike COPY (two round
trips per table, and not allowed in pipeline mode) these statements go out with the
rollup upserts, the host update and the COMMIT in the batch's last round trip; on this
two-core machine that won more than COPY's cheaper parsing in PostgreSQL costs
(docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from board.db.pgtext import int_array, nullable_int_array, nullable_text_array, text_array
from board.ingest.gpuids import GpuInfo, GpuKey
from board.ingest.normalize import Observation, gpu_state

_OBSERVATIONS = """
    INSERT INTO host_observations (workspace_id, host_id, observed_at, received_at,
        collection_status, errors, agent_version, driver_version)
    SELECT ws, host_id, observed_at, received_at, status, string_to_array(errors, chr(31)),
           agent_version, driver_version
    FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[], %s::timestamptz[], %s::text[],
                %s::text[], %s::text[], %s::text[])
         AS o(ws, host_id, observed_at, received_at, status, errors, agent_version,
              driver_version)
"""

_GPUS = """
    INSERT INTO gpu_samples (workspace_id, host_id, observed_at, gpu_id, gpu_index, util_pct,
        memory_used_mb, memory_total_mb, temperature_c, power_w, reported_state, state)
    SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[], %s::bigint[],
        %s::smallint[], %s::smallint[], %s::int[], %s::int[], %s::smallint[], %s::int[],
        %s::text[], %s::text[])
"""

_PROCESSES = """
    INSERT INTO process_samples (workspace_id, host_id, observed_at, gpu_id, pid, linux_user,
        name, type, memory_used_mb)
    SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[], %s::bigint[],
        %s::int[], %s::text[], %s::text[], %s::text[], %s::bigint[])
"""


def observation_params(observations: Sequence[Observation]) -> list[str]:
    return [
        int_array(o.workspace_id for o in observations),
        int_array(o.host_id for o in observations),
        text_array(o.observed_at.isoformat() for o in observations),
        text_array(o.received_at.isoformat() for o in observations),
        text_array(o.snapshot.collectionStatus for o in observations),
        # Arrays of arrays must be rectangular; join each observation's codes instead.
        text_array(chr(31).join(o.snapshot.errors) for o in observations),
        text_array(o.snapshot.host.agentVersion for o in observations),
        text_array(o.snapshot.host.driverVersion for o in observations),
    ]


def sample_params(
    observations: Sequence[Observation], gpu_ids: dict[GpuKey, GpuInfo]
) -> tuple[list[str] | None, list[str] | None]:
    """The gpu_samples and process_samples columns (None when there are no rows)."""
    gpus: list[tuple[Any, ...]] = []
    processes: list[tuple[Any, ...]] = []
    for o in observations:
        ws, host, at = o.workspace_id, o.host_id, o.observed_at.isoformat()
        partial = o.snapshot.collectionStatus == "partial"
        for g in o.snapshot.gpus:
            gpu_id = gpu_ids[(host, g.uuid)].gpu_id
            gpus.append(
                (ws, host, at, gpu_id, g.index, g.utilPct, g.memoryUsedMb, g.memoryTotalMb,
                 g.temperatureC, g.powerW, g.usageState, gpu_state(g, partial))
            )  # fmt: skip
            for p in g.processes:
                processes.append(
                    (ws, host, at, gpu_id, p.pid, p.linuxUser, p.name, p.type or "compute",
                     p.memoryUsedMb)
                )  # fmt: skip
    gpu_columns = None
    if gpus:
        ws_, host_, at_, gpu_, index, util, used, total, temp, power, reported, state = zip(
            *gpus, strict=True
        )
        gpu_columns = [
            *(int_array(c) for c in (ws_, host_)),
            text_array(at_),
            *(int_array(c) for c in (gpu_, index, util, used, total)),
            nullable_int_array(temp),
            nullable_int_array(power),
            nullable_text_array(reported),
            text_array(state),
        ]
    process_columns = None
    if processes:
        ws_, host_, at_, gpu_, pid, user, name, ptype, memory = zip(*processes, strict=True)
        process_columns = [
            *(int_array(c) for c in (ws_, host_)),
            text_array(at_),
            *(int_array(c) for c in (gpu_, pid)),
            *(text_array(c) for c in (user, name, ptype)),
            nullable_int_array(memory),
        ]
    return gpu_columns, process_columns


async def insert_raw(
    conn: psycopg.AsyncConnection[Any],
    observations: Sequence[Observation],
    gpu_ids: dict[GpuKey, GpuInfo],
) -> None:
    """host_observations, gpu_samples and process_samples rows of the batch."""
    await conn.execute(_OBSERVATIONS, observation_params(observations))
    gpu_columns, process_columns = sample_params(observations, gpu_ids)
    if gpu_columns is not None:
        await conn.execute(_GPUS, gpu_columns)
    if process_columns is not None:
        await conn.execute(_PROCESSES, process_columns)
