"""Where N GPUs are free: now, or unbooked through a range ahead; best fit first.

A GPU can be offered when its host is fresh (`ok` or `partial`) and outside a
maintenance window (now, or at any time of the range), it is listed in the host's
newest observation (a missing GPU never is), its model matches, and:
- now: its availability is `free` (nobody's compute process on it, no booking in force)
  and total minus used memory is at least minFreeMemoryMb;
- for a range: no booking of it overlaps the range, and its memory (the whole card: a
  booking has it) is at least minFreeMemoryMb; a range that began already must also be
  free now, as above.

Best fit: with sameHost, each candidate is one host with N such GPUs, the host with the
fewest left over first (a big free host stays whole for a big job), its GPUs those with
the least memory that still suffices. Without sameHost, the candidates together are one
selection over as few hosts as possible. When nothing fits, the candidates show the
closest: the host with the most such GPUs (sameHost), or every such GPU.

Read from the hosts' newest ticks (no raw history), the bookings and the windows: a few
indexed queries however large the fleet (docs/benchmarks.md, bench/capacity.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from board.capacity.params import CapacityQuery
from board.capacity.schemas import Candidate, CandidateGpu, CapacityOut
from board.db.connection import report_connection
from board.health.maintenance_windows import window_rules
from board.health.windows import in_force, overlapping
from board.hosts.freshness import freshness
from board.reservations.availability import availability, booked_during, bookings_in_force

MAX_CANDIDATES = 20

_HOSTS = """
    SELECT id, public_id, display_name, latest_observed_at, latest_collection_status,
           latest_tick
    FROM hosts WHERE workspace_id = %s AND revoked_at IS NULL
"""
_DEVICES = "SELECT id, uuid, gpu_index, name FROM gpus WHERE workspace_id = %s"


@dataclass(frozen=True)
class _Host:
    host_id: str
    name: str
    gpus: list[CandidateGpu]  # eligible, tightest first

    def key(self, wanted: int) -> tuple[int, int, str, str]:
        spare = len(self.gpus) - wanted
        memory = sum(g.free_memory_mb or 0 for g in self.gpus[:wanted])
        return (spare, memory, self.name.casefold(), self.host_id)


def _tightest(gpu: CandidateGpu) -> tuple[int, int, str]:
    return (gpu.free_memory_mb or 0, gpu.index, gpu.uuid)


async def find_capacity(
    session: AsyncSession,
    workspace_id: int,
    stale_after_seconds: int,
    query: CapacityQuery,
    now: datetime,
) -> CapacityOut:
    hosts = await _eligible(session, workspace_id, stale_after_seconds, query, now)
    fits, candidates = (_same_host if query.same_host else _any_host)(hosts, query.gpus)
    return CapacityOut(
        fits=fits,
        candidates=[
            Candidate(host_id=h.host_id, display_name=h.name, gpus=h.gpus) for h in candidates
        ],
        gpus_wanted=query.gpus,
        min_free_memory_mb=query.min_free_memory_mb,
        from_=query.start,
        to=query.end,
        same_host=query.same_host,
        model=query.model,
    )


async def _eligible(
    session: AsyncSession,
    workspace_id: int,
    stale_after_seconds: int,
    query: CapacityQuery,
    now: datetime,
) -> list[_Host]:
    conn = await report_connection(session)
    rows = await (await conn.execute(_HOSTS, [workspace_id])).fetchall()
    fresh = [
        r for r in rows if freshness(r[3], r[4], now, stale_after_seconds) in ("ok", "partial")
    ]
    if not fresh:
        return []
    ids = [r[0] for r in fresh]
    cur = await conn.execute(_DEVICES, [workspace_id])
    devices = {gpu_id: (uuid, index, name) for gpu_id, uuid, index, name in await cur.fetchall()}
    bookings = await bookings_in_force(conn, workspace_id, ids, now)
    booked: set[int] = set()
    rules = await window_rules(session, workspace_id)
    if query.start is not None and query.end is not None:
        booked = await booked_during(conn, workspace_id, ids, query.start, query.end)
        closed = {o.host_id for o in overlapping(rules, query.start, query.end)}
    else:
        closed = set(in_force(rules, now))
    must_be_free_now = query.start is None or query.start <= now
    model = query.model.casefold()
    found: list[_Host] = []
    for host_id, public, name, _, _, tick in fresh:
        if host_id in closed:
            continue
        gpus: list[CandidateGpu] = []
        for gpu_id, state, _util, used, total, holders, *_ in json.loads(tick) if tick else ():
            if gpu_id not in devices or gpu_id in booked:
                continue
            uuid, index, gpu_name = devices[gpu_id]
            if model and model not in gpu_name.casefold():
                continue
            booking = bookings.get((host_id, uuid))
            users = frozenset(booking.linux_users) if booking is not None else None
            now_shown = availability(True, state, tuple(holders), users)
            if must_be_free_now:
                if now_shown != "free":
                    continue
                free = total - used if total is not None and used is not None else None
            else:
                free = total
            if (free or 0) < query.min_free_memory_mb:
                continue
            gpus.append(
                CandidateGpu(
                    uuid=uuid,
                    index=index,
                    name=gpu_name,
                    free_memory_mb=free,
                    availability=now_shown,
                    memory_total_mb=total,
                )
            )
        if gpus:
            found.append(_Host(str(public), name, sorted(gpus, key=_tightest)))
    return found


def _same_host(hosts: list[_Host], wanted: int) -> tuple[bool, list[_Host]]:
    fitting = sorted((h for h in hosts if len(h.gpus) >= wanted), key=lambda h: h.key(wanted))
    if fitting:
        return True, [_Host(h.host_id, h.name, h.gpus[:wanted]) for h in fitting[:MAX_CANDIDATES]]
    closest = sorted(hosts, key=lambda h: (-len(h.gpus), h.name.casefold(), h.host_id))
    return False, closest[:1]


def _any_host(hosts: list[_Host], wanted: int) -> tuple[bool, list[_Host]]:
    """Whole hosts, most such GPUs first, until one host can hold what is left: the best
    fit of those gives the rest."""
    pool = sorted(hosts, key=lambda h: (-len(h.gpus), h.name.casefold(), h.host_id))
    chosen: list[_Host] = []
    left = wanted
    while left > 0 and pool:
        holding = [h for h in pool if len(h.gpus) >= left]
        if holding:
            best = min(holding, key=lambda h: h.key(left))
            chosen.append(_Host(best.host_id, best.name, best.gpus[:left]))
            return True, chosen
        taken = pool.pop(0)
        chosen.append(taken)
        left -= len(taken.gpus)
    return left <= 0, chosen
