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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg

from board.ingest.hostlock import LockedHost
from board.ingest.normalize import decode_since, decode_tick, encode_tick
from board.rollups.crediting import GpuTick, Tick, from_us, gpu_ticks, to_us
from board.rollups.gaps import GapSchedule

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
    gaps: GapSchedule,
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
            limit = gaps.at(prev.observed_us)
            before = {g.gpu_id: g for g in prev.gpus} if 0 < gap <= limit else {}
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
            starts = advance(None, {}, ticks, host.gaps)
            kept.newest[host_id] = encode_tick(ticks[-1], _known(starts))
            continue
        if on_row is not None and host.latest_tick:
            prev = decode_tick(host_id, latest_us, host.latest_tick)
            at_latest = await _restate(conn, host, prev, on_row, late) if late else on_row
            if fresh:
                starts = advance(prev, at_latest, fresh, host.gaps)
                kept.newest[host_id] = encode_tick(fresh[-1], _known(starts))
            elif at_latest != on_row:
                kept.restated.append((host.workspace_id, host_id, encode_tick(prev, at_latest)))
            continue
        # A tick written before run starts were kept: once, from the raw history.
        newest, known = await _recompute(conn, host, ticks)
        encoded = encode_tick(newest, known)
        if fresh:
            kept.newest[host_id] = encoded
        elif encoded != host.latest_tick:
            kept.restated.append((host.workspace_id, host_id, encoded))
    return kept


async def _restate(
    conn: psycopg.AsyncConnection[Any],
    host: LockedHost,
    prev: Tick,
    since: dict[int, int],
    late: list[Tick],
) -> dict[int, int]:
    """The run starts at the host's newest stored tick `prev` once the `late` points (in
    time order, all before it) are in; `since` are its starts before them.

    Only what the late points touch is read, never the whole run: a late point long
    before a run's start touches nothing; one inside a run that does not continue it
    breaks the run, which then starts at the point after it (the newest such breaker
    decides); one within maxSampleGap before a run's start that continues it may extend
    the run back, and only then is the history read, backwards from that start to where
    the run breaks. (A host with a month of one unbroken run made every late point
    re-read the month: seconds and hundreds of MiB per push.)
    """
    gap = host.gaps.widest_us  # no late point further back can continue a run
    keys = {g.gpu_id: run_key(g) for g in prev.gpus}
    late_gpus = [(t.observed_us, {g.gpu_id: g for g in t.gpus}) for t in late]
    starts = dict(since)
    breaker: dict[int, int] = {}  # gpu_id -> the newest late point that breaks its run
    extend: dict[int, int] = {}  # gpu_id -> its run start, which a late point may extend
    for gpu_id, start in since.items():
        key = keys.get(gpu_id)
        if key is None:
            continue
        for at, gpus in late_gpus:
            if at < start - gap:
                continue
            mine = gpus.get(gpu_id)
            continues = mine is not None and run_key(mine) == key
            if at >= start and not continues:
                breaker[gpu_id] = at
            elif at < start and continues:
                extend[gpu_id] = start
    if breaker:
        following = await _points_after(conn, host, sorted(set(breaker.values())))
        late_times = [at for at, _ in late_gpus]
        for gpu_id, at in breaker.items():
            candidates = [t for t in late_times if t > at]
            # The stored point after it; the newest one, were the run not what it was.
            candidates.append(following.get(at, prev.observed_us))
            starts[gpu_id] = min(candidates)
            extend.pop(gpu_id, None)
    if extend:
        starts.update(await _walk_back(conn, host, extend, keys, late_gpus))
    return starts


async def _points_after(
    conn: psycopg.AsyncConnection[Any], host: LockedHost, points_us: list[int]
) -> dict[int, int]:
    """For each point inside a run, the stored observation right after it (within
    maxSampleGap, as the run was unbroken there)."""
    cur = await conn.execute(
        """
        SELECT b.t, (SELECT min(r.observed_at)
                     FROM raw_observations(%s, %s, b.t + interval '1 microsecond',
                                           b.t + %s * interval '1 microsecond') r)
        FROM unnest(%s::timestamptz[]) AS b(t)
        """,
        [host.workspace_id, host.host_id, host.gaps.widest_us, [from_us(p) for p in points_us]],
    )
    return {to_us(t): to_us(nxt) for t, nxt in await cur.fetchall() if nxt is not None}


# Observations read at a time when a run is followed back (memory per step, not per run).
WALK_ROWS = 500


async def _walk_back(
    conn: psycopg.AsyncConnection[Any],
    host: LockedHost,
    starts: dict[int, int],
    keys: Mapping[int, tuple[str, tuple[str, ...]]],
    late_gpus: list[tuple[int, dict[int, GpuTick]]],
) -> dict[int, int]:
    """Each GPU's run followed back from its start `starts[gpu]` through the stored
    history and the late points, a bounded step at a time, to where it breaks."""
    gaps = host.gaps
    gap = gaps.widest_us  # a window with no point this far before a run start ends it
    cursor = dict(starts)  # the earliest point of each run followed so far
    done: dict[int, int] = {}
    hi = max(cursor.values())  # the step reads points before this, newest first
    oldest = await _oldest_observation(conn, host)
    # Late points older than every stored one are history too.
    oldest_us = min([to_us(oldest) if oldest is not None else hi, *(at for at, _ in late_gpus)])
    window = max(FIRST_WINDOW // timedelta(microseconds=1), 4 * gap)
    while cursor:
        stored = await _stored_before(conn, host, hi, window)
        low = stored[-1][0] if len(stored) == WALK_ROWS else hi - window
        points = sorted(
            [*stored, *((at, gpus) for at, gpus in late_gpus if low <= at < hi)],
            key=lambda p: p[0],
            reverse=True,
        )
        for at, gpus in points:
            for gpu_id, earliest in list(cursor.items()):
                if at >= earliest:
                    continue
                mine = gpus.get(gpu_id)
                continues = mine is not None and run_key(mine) == keys[gpu_id]
                if continues and earliest - at <= gaps.at(at):
                    cursor[gpu_id] = at
                else:
                    done[gpu_id] = cursor.pop(gpu_id)
        # Every point in [low, hi) was seen: a run with none within the gap before it
        # starts where it is; so does every run once the history is read.
        for gpu_id, earliest in list(cursor.items()):
            if earliest - gap >= low or low <= oldest_us:
                done[gpu_id] = cursor.pop(gpu_id)
        hi = low
    return done


async def _stored_before(
    conn: psycopg.AsyncConnection[Any], host: LockedHost, hi_us: int, window_us: int
) -> list[tuple[int, dict[int, GpuTick]]]:
    """The host's stored observations in [hi - window, hi), newest first, at most
    WALK_ROWS of them, each GPU with its state and holders."""
    cur = await conn.execute(
        """
        SELECT r.observed_at, r.gpu_id, r.gpu_state, r.process_gpu_id, r.process_user,
               r.process_type
        FROM raw_observations(%s, %s, %s, %s) r
        WHERE r.observed_at < %s
        ORDER BY r.observed_at DESC
        LIMIT %s
        """,
        [
            host.workspace_id,
            host.host_id,
            from_us(hi_us - window_us),
            from_us(hi_us),
            from_us(hi_us),
            WALK_ROWS,
        ],
    )
    found = []
    for observed_at, gpu_ids, states, *processes in await cur.fetchall():
        zeros = [0] * len(gpu_ids)
        gpus = gpu_ticks(gpu_ids, states, zeros, zeros, zeros, *processes)
        found.append((to_us(observed_at), {g.gpu_id: g for g in gpus}))
    return found


def _known(starts: RunStarts) -> dict[int, int]:
    return {gpu_id: at for gpu_id, at in starts.items() if at is not None}


async def _recompute(
    conn: psycopg.AsyncConnection[Any], host: LockedHost, batch_ticks: list[Tick]
) -> tuple[Tick, dict[int, int]]:
    """The host's newest tick and its run starts, from raw history plus the batch's points."""
    assert host.latest_observed_at is not None
    newest_us = max(to_us(host.latest_observed_at), batch_ticks[-1].observed_us)
    oldest = await _oldest_observation(conn, host)
    window = max(FIRST_WINDOW, timedelta(microseconds=4 * host.gaps.widest_us))
    while True:
        low_us = newest_us - window // timedelta(microseconds=1)
        stored = await _stored_ticks(conn, host, from_us(low_us), from_us(newest_us))
        merged = {t.observed_us: t for t in stored}
        merged.update({t.observed_us: t for t in batch_ticks if t.observed_us > low_us})
        series = [merged[us] for us in sorted(merged)]
        older = (oldest is not None and to_us(oldest) <= low_us) or any(
            t.observed_us <= low_us for t in batch_ticks
        )
        starts = advance(None, {}, series, host.gaps, open_start=older)
        if not older or all(at is not None for at in starts.values()):
            break
        window *= 4
    newest = series[-1]
    if newest.observed_us == to_us(host.latest_observed_at) and host.latest_tick:
        newest = decode_tick(host.host_id, newest.observed_us, host.latest_tick)
    return newest, _known(starts)


async def _oldest_observation(conn: psycopg.AsyncConnection[Any], host: LockedHost) -> Any:
    cur = await conn.execute(
        """
        SELECT least(
            (SELECT min(observed_at) FROM host_observations
             WHERE workspace_id = %(ws)s AND host_id = %(host)s),
            (SELECT min(first_at) FROM observation_hours
             WHERE workspace_id = %(ws)s AND host_id = %(host)s))
        """,
        {"ws": host.workspace_id, "host": host.host_id},
    )
    row = await cur.fetchone()
    return row[0] if row else None


async def _stored_ticks(
    conn: psycopg.AsyncConnection[Any], host: LockedHost, low: Any, high: Any
) -> list[Tick]:
    """The host's stored observations in (low, high], each GPU with its state and holders.

    An observation without GPUs (an error heartbeat) is kept: it breaks every run.
    """
    cur = await conn.execute(
        """
        SELECT r.observed_at, r.gpu_id, r.gpu_state, r.process_gpu_id, r.process_user,
               r.process_type
        FROM raw_observations(%s, %s, %s, %s) r
        WHERE r.observed_at > %s
        ORDER BY r.observed_at
        """,
        [host.workspace_id, host.host_id, low, high, low],
    )
    ticks = []
    for observed_at, gpu_ids, states, *processes in await cur.fetchall():
        zeros = [0] * len(gpu_ids)  # runs need only the state and the holders
        gpus = gpu_ticks(gpu_ids, states, zeros, zeros, zeros, *processes)
        ticks.append(Tick(host.host_id, to_us(observed_at), gpus))
    return ticks


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
