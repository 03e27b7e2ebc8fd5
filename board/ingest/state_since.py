"""How long each GPU has been in its state (`stateSince`), kept with the host's newest tick.

accounting.md: a GPU's stateSince is the time of the first observation of the unbroken
run that ends at its newest observation in which it had its current state (for
`active` and `idle_held`, also the same set of Linux users holding it). A gap longer
than maxSampleGap, or the GPU missing from an observation, breaks the run.

Reading it for 2,400 GPUs must be cheap, so it is computed where the newest state is
written: the host row's tick carries each GPU's run start (normalize.encode_tick), and
a batch of in-order points only walks forward from it. A point that arrives late and
lands inside (or just before) a current run may extend or break that run, and so may a
tick written before this field existed: then the host's run starts are recomputed from
its raw history, reading back from the newest observation until every run has its
start (rare: a replaying agent, the first push after the upgrade).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg

from board.ingest.hostlock import LockedHost
from board.ingest.normalize import decode_since, decode_tick, encode_tick
from board.rollups.crediting import GpuTick, Tick, from_us, to_us

# A run reaching back past the history read so far: its start is not known yet.
RunStarts = dict[int, int | None]
FIRST_WINDOW = timedelta(hours=2)


def run_key(gpu: GpuTick) -> tuple[str, tuple[str, ...]]:
    """What must stay the same for a run to continue: the state, and who holds a held card."""
    return (gpu.state, gpu.holders if gpu.state != "idle" else ())


def advance(
    prev: Tick | None,
    since: Mapping[int, int | None],
    ticks: Iterable[Tick],
    max_gap_us: int,
    open_start: bool = False,
) -> RunStarts:
    """Each GPU's run start after `ticks` (in time order) follow `prev`, whose are `since`.

    `open_start`: older history exists before the first tick when there is no `prev`,
    so a run reaching that first tick has an unknown start (None).
    """
    starts: RunStarts = dict(since)
    for tick in ticks:
        if prev is None:
            starts = {g.gpu_id: None if open_start else tick.observed_us for g in tick.gpus}
        else:
            gap = tick.observed_us - prev.observed_us
            before = {g.gpu_id: g for g in prev.gpus} if 0 < gap <= max_gap_us else {}
            following: RunStarts = {}
            for g in tick.gpus:
                last = before.get(g.gpu_id)
                if last is not None and run_key(last) == run_key(g):
                    following[g.gpu_id] = starts.get(g.gpu_id, tick.observed_us)
                else:
                    following[g.gpu_id] = tick.observed_us
            starts = following
        prev = tick
    return starts


@dataclass(slots=True)
class KeptTicks:
    """The tick each host row keeps after the batch, with its GPUs' run starts."""

    # host_id -> encoded tick, for hosts whose newest observation moves forward
    newest: dict[int, str] = field(default_factory=dict)
    # (workspace_id, host_id, encoded tick): newest unchanged, run starts changed
    restated: list[tuple[int, int, str]] = field(default_factory=list)

    def tick_for(self, host_id: int, tick: Tick) -> str:
        return self.newest.get(host_id) or encode_tick(tick)


async def keep_state_since(
    conn: psycopg.AsyncConnection[Any], new_ticks: Mapping[int, tuple[LockedHost, list[Tick]]]
) -> KeptTicks:
    """host_id -> (its locked row, the batch's new ticks of it in time order)."""
    kept = KeptTicks()
    for host_id, (host, ticks) in new_ticks.items():
        if not ticks:
            continue
        latest_us = to_us(host.latest_observed_at) if host.latest_observed_at else None
        on_row = decode_since(host.latest_tick) if host.latest_tick else None
        fresh = [t for t in ticks if latest_us is None or t.observed_us > latest_us]
        late = [t for t in ticks if latest_us is not None and t.observed_us <= latest_us]
        if latest_us is None:
            starts = advance(None, {}, ticks, host.max_gap_us)
            kept.newest[host_id] = encode_tick(ticks[-1], _known(starts))
            continue
        if on_row is not None and not _reaches_a_run(late, on_row, latest_us, host.max_gap_us):
            if fresh and host.latest_tick:
                prev = decode_tick(host_id, latest_us, host.latest_tick)
                starts = advance(prev, on_row, fresh, host.max_gap_us)
                kept.newest[host_id] = encode_tick(fresh[-1], _known(starts))
            continue
        newest, known = await _recompute(conn, host, ticks)
        encoded = encode_tick(newest, known)
        if fresh:
            kept.newest[host_id] = encoded
        elif encoded != host.latest_tick:
            kept.restated.append((host.workspace_id, host_id, encoded))
    return kept


def _known(starts: RunStarts) -> dict[int, int]:
    return {gpu_id: at for gpu_id, at in starts.items() if at is not None}


def _reaches_a_run(late: list[Tick], starts: dict[int, int], latest_us: int, gap: int) -> bool:
    """Could one of the late points extend or break a current run?

    A point more than maxSampleGap before every run's start touches none of them.
    """
    if not late:
        return False
    earliest_start = min(starts.values(), default=latest_us)
    return max(t.observed_us for t in late) >= earliest_start - gap


async def _recompute(
    conn: psycopg.AsyncConnection[Any], host: LockedHost, batch_ticks: list[Tick]
) -> tuple[Tick, dict[int, int]]:
    """The host's newest tick and its run starts, from raw history plus the batch's points."""
    assert host.latest_observed_at is not None
    newest_us = max(to_us(host.latest_observed_at), batch_ticks[-1].observed_us)
    oldest = await _oldest_observation(conn, host)
    window = max(FIRST_WINDOW, timedelta(microseconds=4 * host.max_gap_us))
    while True:
        low_us = newest_us - window // timedelta(microseconds=1)
        stored = await _stored_ticks(conn, host, from_us(low_us), from_us(newest_us))
        merged = {t.observed_us: t for t in stored}
        merged.update({t.observed_us: t for t in batch_ticks if t.observed_us > low_us})
        series = [merged[us] for us in sorted(merged)]
        older = (oldest is not None and to_us(oldest) <= low_us) or any(
            t.observed_us <= low_us for t in batch_ticks
        )
        starts = advance(None, {}, series, host.max_gap_us, open_start=older)
        if not older or all(at is not None for at in starts.values()):
            break
        window *= 4
    newest = series[-1]
    if newest.observed_us == to_us(host.latest_observed_at) and host.latest_tick:
        newest = decode_tick(host.host_id, newest.observed_us, host.latest_tick)
    return newest, _known(starts)


async def _oldest_observation(conn: psycopg.AsyncConnection[Any], host: LockedHost) -> Any:
    cur = await conn.execute(
        "SELECT min(observed_at) FROM host_observations WHERE workspace_id = %s AND host_id = %s",
        [host.workspace_id, host.host_id],
    )
    row = await cur.fetchone()
    return row[0] if row else None


async def _stored_ticks(
    conn: psycopg.AsyncConnection[Any], host: LockedHost, low: Any, high: Any
) -> list[Tick]:
    """The host's stored observations in (low, high], each GPU with its state and holders.

    An observation without GPU rows (an error heartbeat) is kept: it breaks every run.
    """
    cur = await conn.execute(
        """
        SELECT o.observed_at, g.gpu_id, g.state,
               (SELECT coalesce(array_agg(DISTINCT p.linux_user ORDER BY p.linux_user), '{}')
                FROM process_samples p
                WHERE p.workspace_id = o.workspace_id AND p.host_id = o.host_id
                  AND p.observed_at = o.observed_at AND p.gpu_id = g.gpu_id
                  AND p.type = 'compute')
        FROM host_observations o
        LEFT JOIN gpu_samples g
               ON g.workspace_id = o.workspace_id AND g.host_id = o.host_id
              AND g.observed_at = o.observed_at
        WHERE o.workspace_id = %s AND o.host_id = %s
          AND o.observed_at > %s AND o.observed_at <= %s
        ORDER BY o.observed_at, g.gpu_id
        """,
        [host.workspace_id, host.host_id, low, high],
    )
    gpus: dict[int, list[GpuTick]] = defaultdict(list)
    for observed_at, gpu_id, state, holders in await cur.fetchall():
        bucket = gpus[to_us(observed_at)]
        if gpu_id is not None:
            bucket.append(GpuTick(gpu_id, state, 0, 0, 0, tuple(holders)))
    return [Tick(host.host_id, us, tuple(g)) for us, g in gpus.items()]


async def write_restated(conn: psycopg.AsyncConnection[Any], kept: KeptTicks) -> None:
    """Hosts whose newest observation stays but whose run starts a late point changed."""
    for workspace_id, host_id, encoded in kept.restated:
        await conn.execute(
            "UPDATE hosts SET latest_tick = %s WHERE workspace_id = %s AND id = %s",
            [encoded, workspace_id, host_id],
        )


def new_ticks_by_host(
    groups: Sequence[Any],
) -> dict[int, tuple[LockedHost, list[Tick]]]:
    """The batch's new ticks of each host in time order, from its interval groups."""
    found: dict[int, tuple[LockedHost, list[Tick]]] = {}
    for group in groups:
        host: LockedHost = group.host
        found.setdefault(host.host_id, (host, []))[1].extend(group.ticks)
    for _, ticks in found.values():
        ticks.sort(key=lambda t: t.observed_us)
    return found
