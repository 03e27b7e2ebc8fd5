"""Each host's newest GPUs and processes, read from the raw samples at its newest observation.

Ingest writes only the pointer (`hosts.latest_observed_at`); people read far less often
than agents push, so the join happens here rather than a JSON copy on every push.
A host silent for longer than the raw retention has no samples left: no GPUs shown.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from board.hosts.schemas import GpuOut, ProcessOut
from board.rollups.crediting import from_us

_GPUS = text(
    """
    SELECT g.host_id, g.gpu_id, d.uuid, g.gpu_index, d.name, g.state, g.reported_state,
           g.util_pct, g.memory_used_mb, g.memory_total_mb, g.temperature_c, g.power_w
    FROM hosts h
    JOIN gpu_samples g ON g.workspace_id = h.workspace_id AND g.host_id = h.id
                      AND g.observed_at = h.latest_observed_at
    JOIN gpus d ON d.workspace_id = g.workspace_id AND d.id = g.gpu_id
    WHERE h.workspace_id = :ws AND h.id = ANY(:hosts)
    ORDER BY g.host_id, g.gpu_index, g.gpu_id
    """
)

_PROCESSES = text(
    """
    SELECT p.host_id, p.gpu_id, p.pid, p.linux_user, p.name, p.type, p.memory_used_mb
    FROM hosts h
    JOIN process_samples p ON p.workspace_id = h.workspace_id AND p.host_id = h.id
                          AND p.observed_at = h.latest_observed_at
    WHERE h.workspace_id = :ws AND h.id = ANY(:hosts)
    ORDER BY p.host_id, p.gpu_id, p.pid, p.linux_user, p.name
    """
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
    processes: dict[int, list[ProcessOut]] = defaultdict(list)
    for _, gpu_id, pid, user, name, ptype, memory in await session.execute(_PROCESSES, params):
        # model_construct: the database's own values, already of the right types; at
        # fleet scale (2,400 GPUs, ~5,000 processes) validating each costs ~30 ms a page.
        processes[gpu_id].append(
            ProcessOut.model_construct(
                pid=pid, linux_user=user, name=name, type=ptype, memory_used_mb=memory
            )
        )
    gpus: dict[int, list[GpuOut]] = defaultdict(list)
    for row in await session.execute(_GPUS, params):
        host_id, gpu_id, uuid, index, name, state, reported, util, used, total, temp, power = row
        gpus[host_id].append(
            GpuOut.model_construct(
                uuid=uuid,
                index=index,
                name=name,
                usage_state=state,
                reported_usage_state=reported,
                state_since=since.get(gpu_id),
                util_pct=util,
                memory_used_mb=used,
                memory_total_mb=total,
                temperature_c=temp,
                power_w=power,
                processes=processes.get(gpu_id, []),
            )
        )
    return gpus
