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
from board.health.windows import in_force as in_force_now
from board.health.windows import overlapping
from board.hosts.freshness import freshness
from board.reservations.availability import (
    Availability,
    availability,
    booked_during,
    booking_users_in_force,
)

MAX_CANDIDATES = 20
# (host id, GPU uuid) -> the Linux users of the booking in force now.
BookedUsers = dict[tuple[int, str], frozenset[str]]

_HOSTS = """
    SELECT id, public_id, display_name, latest_observed_at, latest_collection_status,
           latest_tick
    FROM hosts WHERE workspace_id = %s AND revoked_at IS NULL
"""
_DEVICES = "SELECT id, uuid, gpu_index, name FROM gpus WHERE workspace_id = %s"


@dataclass(slots=True)
class _Gpu:
    """A GPU that can be offered, as plain values (models are made for the answer only)."""

    uuid: str
    index: int
    name: str
    free: int | None
    total: int | None
    state: str
    holders: tuple[str, ...]
    availability: Availability | None = None


@dataclass(frozen=True)
class _Host:
    host_id: int
    public_id: str
    name: str
    gpus: list[_Gpu]  # tightest first

    def key(self, wanted: int) -> tuple[int, int, str, str]:
        spare = len(self.gpus) - wanted
        memory = sum(g.free or 0 for g in self.gpus[:wanted])
        return (spare, memory, self.name.casefold(), self.public_id)

    def first(self, count: int) -> _Host:
        return _Host(self.host_id, self.public_id, self.name, self.gpus[:count])


def _tightest(gpu: _Gpu) -> tuple[int, int, str]:
    return (gpu.free or 0, gpu.index, gpu.uuid)


async def find_capacity(
    session: AsyncSession,
    workspace_id: int,
    stale_after_seconds: int,
    query: CapacityQuery,
    now: datetime,
) -> CapacityOut:
    conn = await report_connection(session)
    must_be_free_now = query.start is None or query.start <= now
    in_force: BookedUsers = {}
    hosts = await _eligible(session, workspace_id, stale_after_seconds, query, now, in_force)
    fits, chosen = (_same_host if query.same_host else _any_host)(hosts, query.gpus)
    if not must_be_free_now and chosen:
        # Only shown for a range ahead: read for the hosts in the answer alone.
        ids = [h.host_id for h in chosen]
        in_force = await booking_users_in_force(conn, workspace_id, ids, now)
    candidates = []
    for host in chosen:
        gpus = []
        for g in host.gpus:
            users = in_force.get((host.host_id, g.uuid))
            shown = g.availability or availability(True, g.state, g.holders, users)
            gpus.append(
                CandidateGpu.model_construct(
                    uuid=g.uuid,
                    index=g.index,
                    name=g.name,
                    free_memory_mb=g.free,
                    availability=shown,
                    memory_total_mb=g.total,
                )
            )
        candidates.append(
            Candidate.model_construct(host_id=host.public_id, display_name=host.name, gpus=gpus)
        )
    return CapacityOut(
        fits=fits,
        candidates=candidates,
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
    in_force: BookedUsers,
) -> list[_Host]:
    """The hosts with GPUs that can be offered, each GPU's list tightest first;
    `in_force` is filled with the bookings in force now where they were read."""
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
    rules = await window_rules(session, workspace_id)
    booked: set[int] = set()
    if query.start is not None and query.end is not None:
        booked = await booked_during(conn, workspace_id, ids, query.start, query.end)
        closed = {o.host_id for o in overlapping(rules, query.start, query.end)}
    else:
        closed = set(in_force_now(rules, now))
    must_be_free_now = query.start is None or query.start <= now
    if must_be_free_now:
        in_force.update(await booking_users_in_force(conn, workspace_id, ids, now))
    model = query.model.casefold()
    floor = query.min_free_memory_mb
    found: list[_Host] = []
    for host_id, public, name, _, _, tick in fresh:
        if host_id in closed or not tick:
            continue
        gpus: list[_Gpu] = []
        for gpu_id, state, _util, used, total, holders, *_ in json.loads(tick):
            device = devices.get(gpu_id)
            if device is None or gpu_id in booked:
                continue
            uuid, index, gpu_name = device
            if model and model not in gpu_name.casefold():
                continue
            held = tuple(holders)
            shown: Availability | None = None
            if must_be_free_now:
                shown = availability(True, state, held, in_force.get((host_id, uuid)))
                if shown != "free":
                    continue
                free = total - used if total is not None and used is not None else None
            else:
                free = total  # a booking has the whole card
            if (free or 0) < floor:
                continue
            gpus.append(_Gpu(uuid, index, gpu_name, free, total, state, held, shown))
        if gpus:
            found.append(_Host(host_id, str(public), name, sorted(gpus, key=_tightest)))
    return found


def _same_host(hosts: list[_Host], wanted: int) -> tuple[bool, list[_Host]]:
    fitting = sorted((h for h in hosts if len(h.gpus) >= wanted), key=lambda h: h.key(wanted))
    if fitting:
        return True, [h.first(wanted) for h in fitting[:MAX_CANDIDATES]]
    closest = sorted(hosts, key=lambda h: (-len(h.gpus), h.name.casefold(), h.public_id))
    return False, closest[:1]


def _any_host(hosts: list[_Host], wanted: int) -> tuple[bool, list[_Host]]:
    """Whole hosts, most such GPUs first, until one host can hold what is left: the best
    fit of those gives the rest."""
    pool = sorted(hosts, key=lambda h: (-len(h.gpus), h.name.casefold(), h.public_id))
    chosen: list[_Host] = []
    left = wanted
    while left > 0 and pool:
        holding = [h for h in pool if len(h.gpus) >= left]
        if holding:
            best = min(holding, key=lambda h: h.key(left))
            chosen.append(best.first(left))
            return True, chosen
        taken = pool.pop(0)
        chosen.append(taken)
        left -= len(taken.gpus)
    return left <= 0, chosen
