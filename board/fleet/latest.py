"""Each host's newest GPUs and processes, read from the raw history at its newest observation.

Ingest writes only the pointer (`hosts.latest_observed_at`); people read far less often
than agents push, so the join happens here rather than a JSON copy on every push.
A host silent for longer than the raw retention has no observation left: no GPUs shown.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from board.fleet.schemas import GpuOut, ProcessOut
from board.rollups.crediting import from_us

# One row per host: its newest observation's GPU and process arrays (hot or compacted).
_NEWEST = text(
    """
    SELECT h.id, r.gpu_id, r.gpu_index, r.gpu_state, r.gpu_reported_state, r.gpu_util_pct,
           r.gpu_memory_used_mb, r.gpu_memory_total_mb, r.gpu_temperature_c, r.gpu_power_w,
           r.process_gpu_id, r.process_pid, r.process_user, r.process_name, r.process_type,
           r.process_memory_mb, r.process_job_id
    FROM hosts h
    CROSS JOIN LATERAL raw_observations(h.workspace_id, h.id, h.latest_observed_at,
                                        h.latest_observed_at) r
    WHERE h.workspace_id = :ws AND h.id = ANY(:hosts)
    """
)

_DEVICES = text(
    "SELECT id, uuid, name FROM gpus WHERE workspace_id = :ws AND host_id = ANY(:hosts)"
)


def state_since(latest_ticks: Iterable[str | None]) -> dict[int, datetime]:
    """gpu id -> its stateSince, from the hosts' newest ticks (7th element of each GPU,
    written by the ingest path: board.ingest.normalize.encode_tick)."""
    found: dict[int, datetime] = {}
    for encoded in latest_ticks:
        for gpu in json.loads(encoded) if encoded else ():
            if len(gpu) > 6:
                found[int(gpu[0])] = from_us(int(gpu[6]))
    return found


async def newest_gpus(
    session: AsyncSession,
    workspace_id: int,
    host_ids: list[int],
    since: dict[int, datetime] | None = None,
) -> dict[int, list[GpuOut]]:
    """host id -> its GPUs as the hosts API shows them, processes included, by index.

    `since`: gpu id -> stateSince (state_since of the hosts' rows)."""
    since = since or {}
    params = {"ws": workspace_id, "hosts": host_ids}
    devices = {
        gpu_id: (uuid, name) for gpu_id, uuid, name in await session.execute(_DEVICES, params)
    }
    gpus: dict[int, list[GpuOut]] = defaultdict(list)
    for host_id, *arrays in await session.execute(_NEWEST, params):
        (gpu_ids, indexes, states, reported, utils, used, totals, temps, powers, *procs) = arrays
        *procs, jobs = procs
        if jobs is None:  # no process named its job
            jobs = [None] * len(procs[0])
        processes: dict[int, list[ProcessOut]] = defaultdict(list)
        for gpu_id, pid, user, name, ptype, memory, job in sorted(
            zip(*procs, jobs, strict=True), key=lambda p: (p[0], p[1], p[2], p[3])
        ):
            # model_construct: the database's own values, already of the right types; at
            # fleet scale (2,400 GPUs, ~5,000 processes) validating each costs ~30 ms a page.
            processes[gpu_id].append(
                ProcessOut.model_construct(
                    pid=pid,
                    linux_user=user,
                    name=name,
                    type=ptype,
                    memory_used_mb=memory,
                    job_id=job,
                )
            )
        rows = zip(
            gpu_ids, indexes, states, reported, utils, used, totals, temps, powers, strict=True
        )
        for gpu_id, index, state, reported_state, util, mem, total, temp, power in sorted(
            rows, key=lambda g: (g[1], g[0])
        ):
            if gpu_id not in devices:
                continue  # as the inner join to gpus did before
            uuid, name = devices[gpu_id]
            gpus[host_id].append(
                GpuOut.model_construct(
                    uuid=uuid,
                    index=index,
                    name=name,
                    usage_state=state,
                    reported_usage_state=reported_state,
                    state_since=since.get(gpu_id),
                    util_pct=util,
                    memory_used_mb=mem,
                    memory_total_mb=total,
                    temperature_c=temp,
                    power_w=power,
                    processes=processes.get(gpu_id, []),
                )
            )
    return gpus
