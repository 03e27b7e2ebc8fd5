"""The write path: many observations, one transaction, two round trips.

A batch goes through these phases, in order:

1. lock: the batch's hosts, in key order (board.ingest.hostlock), revocation re-checked,
   and in the same round trip the bookings in force around the batch's points and the
   job GPUs of the hosts whose copy kept by the writer is out of date (board.jobs.batch);
2. classify: each observation to its host's pending list, or revoked;
3. dedupe: repeats inside the batch, then points stored already (only points not newer
   than their host's newest observation look up their stored neighbourhood);
4. resolve GPU ids, refusing a push that would pass maxGpusPerHost (board.ingest.gpuids);
5. group: each host's new points by the stored interval they fall into;
6. credit: every group's interval changes, summed into one RollupDelta;
7. write: raw rows, rollup upserts, the hosts' newest state, and COMMIT.

Lock order, the rule that keeps concurrent batches (and the rebuild, the day refresh and
booking changes) from deadlocking: host rows first, FOR UPDATE in (workspace_id, id)
order, held until COMMIT; only then rows of those hosts (raw, GPU, rollup, figure rows),
each statement's in key order; the one row kind shared between hosts, a workspace's dirty
day mark, is written by the rollup trigger in key order too. All of it must be one
transaction: in autocommit every round trip commits on its own and the host locks would
be gone before the writes, so store_batch takes a connection out of autocommit first.

psycopg's pipeline mode sends BEGIN with the lock (1) and all of the write (7) in one
go; phases 3 and 4 and the openers of 6 read only in the rare cases that need it. On
a small machine each round trip also waits for the event loop (busy parsing other
requests) and for the backend to be scheduled, and that latency, not CPU, was what
limited a writer (docs/benchmarks.md).
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from board.db.pgtext import int_array, text_array
from board.ingest.gpuids import GpuInfo, GpuKey, TooManyGpus, resolve_gpu_ids
from board.ingest.history import Neighbourhood, PointKey, RawKey, load_ticks, neighbourhoods
from board.ingest.hostlock import LockedHost, lock_batch_hosts
from board.ingest.normalize import Observation, decode_tick, tick_of
from board.ingest.rawrows import insert_raw
from board.ingest.state_since import (
    KeptTicks,
    keep_state_since,
    new_ticks_by_host,
    write_restated,
)
from board.jobs.batch import JobGpuCache, ask_batch_jobs
from board.jobs.crediting import JobDelta
from board.jobs.store import upsert_job_delta
from board.reservations.crediting import ReservationDelta
from board.reservations.store import (
    HostSpan,
    ask_batch_bookings,
    upsert_figures,
)
from board.rollups.crediting import RollupDelta, Tick, to_us
from board.rollups.store import upsert_rollup_delta

__all__ = ["GpuInfo", "GpuKey", "Outcome", "TooManyGpus", "store_batch"]


class Outcome(enum.Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"
    REVOKED = "revoked"


@dataclass(slots=True)
class _Batch:
    """A batch under way: each observation's outcome so far, and what is left to store."""

    observations: Sequence[Observation]
    hosts: dict[int, LockedHost]
    outcomes: list[Outcome | TooManyGpus | None]
    # host_id -> indexes (into observations) still to be stored, in batch order
    pending: dict[int, list[int]]

    def settle(self, i: int, outcome: Outcome | TooManyGpus) -> None:
        """Observation i is answered without being stored."""
        self.outcomes[i] = outcome
        self.pending[self.observations[i].host_id].remove(i)

    def in_time_order(self) -> list[tuple[int, Observation]]:
        """(index, observation) still pending, each host's in time order."""
        return [
            (i, self.observations[i])
            for idxs in self.pending.values()
            for i in sorted(idxs, key=lambda i: self.observations[i].observed_at)
        ]

    def to_store(self) -> list[Observation]:
        return [self.observations[i] for idxs in self.pending.values() for i in idxs]

    def stored(self) -> list[Outcome | TooManyGpus]:
        """The final outcomes once the pending observations are committed."""
        for idxs in self.pending.values():
            for i in idxs:
                self.outcomes[i] = Outcome.STORED
        return [o if o is not None else Outcome.REVOKED for o in self.outcomes]


@dataclass(slots=True)
class _IntervalGroup:
    """New points of one host that land in one stored interval, `before` → `after`."""

    host: LockedHost
    before: datetime | None  # the stored opener; None: the host's first observation
    after: datetime | None  # the stored closer; None: nothing stored after
    ticks: list[Tick]

    def tick_on_row(self) -> str | None:
        """The opener's tick when the opener is the host's newest observation (on its row)."""
        if self.before is not None and self.before == self.host.latest_observed_at:
            return self.host.latest_tick or None
        return None


class _NewestState(NamedTuple):
    """A host's newest observation after the batch, and its tick (kept on the host row)."""

    observation: Observation
    tick: Tick


async def store_batch(
    conn: psycopg.AsyncConnection[Any],
    observations: Sequence[Observation],
    gpu_cache: dict[GpuKey, GpuInfo],
    prepared: Callable[[], None] | None = None,
    job_cache: JobGpuCache | None = None,
) -> list[Outcome | TooManyGpus]:
    """Store a batch in one transaction and commit it; one outcome per observation.

    `conn` must not be in a transaction; on any error the transaction is rolled back
    and the error raised. `prepared` is called once the batch's writes are computed,
    just before they are sent with the COMMIT. `job_cache`: the hosts' job GPUs kept
    from earlier batches (board.jobs.batch; the writer's own), None to read them afresh.

    A connection in autocommit mode (a pool hands back whatever mode its last user
    left) is taken out of it for the batch and put back after: in autocommit each
    round trip would be a transaction of its own, the host locks would be gone before
    the writes, and two batches of a host would deadlock or count an interval twice.
    """
    autocommit = conn.autocommit
    if autocommit:
        await conn.set_autocommit(False)
    try:
        return await _store(
            conn, observations, gpu_cache, prepared, {} if job_cache is None else job_cache
        )
    finally:
        if autocommit and not conn.closed:
            await conn.set_autocommit(True)


async def _store(
    conn: psycopg.AsyncConnection[Any],
    observations: Sequence[Observation],
    gpu_cache: dict[GpuKey, GpuInfo],
    prepared: Callable[[], None] | None,
    job_cache: JobGpuCache,
) -> list[Outcome | TooManyGpus]:
    keys = sorted({(o.workspace_id, o.host_id) for o in observations})
    touched: list[GpuKey] = []
    try:
        # BEGIN travels with the lock, and the reads of the bookings and of the job GPUs
        # not kept from earlier batches
        async with conn.pipeline():
            spans = _batch_spans(observations)
            bookings = await ask_batch_bookings(conn, spans)
            job_gpus = await ask_batch_jobs(conn, spans, job_cache)
            hosts = await lock_batch_hosts(conn, keys)
            booked = await bookings.delta()
            jobs = await job_gpus.delta()
        return await _write_locked(
            conn, observations, hosts, gpu_cache, touched, prepared, booked, jobs, spans, job_cache
        )
    except BaseException:
        for key in touched:  # their rows were rolled back (or may have been)
            gpu_cache.pop(key, None)
        await conn.rollback()
        raise


async def _write_locked(
    conn: psycopg.AsyncConnection[Any],
    observations: Sequence[Observation],
    hosts: dict[int, LockedHost],
    gpu_cache: dict[GpuKey, GpuInfo],
    touched: list[GpuKey],
    prepared: Callable[[], None] | None,
    booked: ReservationDelta,
    jobs: JobDelta,
    spans: Sequence[HostSpan],
    job_cache: JobGpuCache,
) -> list[Outcome | TooManyGpus]:
    batch = _classify(observations, hosts)
    _drop_batch_duplicates(batch)
    neighbours = await _look_up_late_points(conn, batch)
    _drop_stored_duplicates(batch, neighbours)
    refused = await resolve_gpu_ids(conn, batch.in_time_order(), hosts, gpu_cache, touched)
    for i, too_many in refused.items():
        batch.settle(i, too_many)
    if touched:
        # A GPU added or renumbered just now moved its host's allocation version (a
        # trigger), and a job's device may name it: read that host's job GPUs again, so
        # the interval this batch closes is matched as a rebuild matches it. Only hosts
        # whose version moved answer (rare: a new GPU, a new minor number, a cold cache).
        jobs = await (await ask_batch_jobs(conn, spans, job_cache)).delta()
    fresh = batch.to_store()
    groups, newest = _group(batch, neighbours, gpu_cache)
    delta = await _credit(conn, groups, booked, jobs)
    kept = await keep_state_since(conn, new_ticks_by_host(groups))
    if prepared is not None:
        prepared()
    async with conn.pipeline():  # one round trip: all the writes and COMMIT
        if fresh:
            await insert_raw(conn, fresh, gpu_cache)
            workspace_of_host = {h.host_id: h.workspace_id for h in hosts.values()}
            # A booking's hours wholly inside it ride on the GPU-hour rows (no extra row).
            # So do a job run's hours wholly inside it that no other run of the GPU shares.
            rides = jobs.ride_rows()
            await upsert_rollup_delta(conn, workspace_of_host, delta, booked.booked, rides)
            await upsert_figures(conn, booked)
            await upsert_job_delta(conn, jobs, workspace_of_host, with_rides=False)
            await _advance_newest(conn, newest, kept)
            await write_restated(conn, kept)
        await conn.commit()
    return batch.stored()


def _classify(observations: Sequence[Observation], hosts: dict[int, LockedHost]) -> _Batch:
    """Each observation to its host's pending list; a revoked or deleted host's is answered."""
    outcomes: list[Outcome | TooManyGpus | None] = [None] * len(observations)
    pending: dict[int, list[int]] = defaultdict(list)
    for i, o in enumerate(observations):
        host = hosts.get(o.host_id)
        if host is None or host.revoked:
            outcomes[i] = Outcome.REVOKED
        else:
            pending[o.host_id].append(i)
    return _Batch(observations, hosts, outcomes, pending)


def _drop_batch_duplicates(batch: _Batch) -> None:
    """Repeats inside the batch: the first copy wins."""
    seen: set[PointKey] = set()
    for idxs in batch.pending.values():
        for i in list(idxs):
            key = (batch.observations[i].host_id, batch.observations[i].observed_at)
            if key in seen:
                batch.settle(i, Outcome.DUPLICATE)
            seen.add(key)


async def _look_up_late_points(
    conn: psycopg.AsyncConnection[Any], batch: _Batch
) -> dict[PointKey, Neighbourhood]:
    """The stored neighbourhood of each point not newer than its host's newest."""
    late: list[RawKey] = []
    for host_id, idxs in batch.pending.items():
        host = batch.hosts[host_id]
        latest = host.latest_observed_at
        for i in idxs:
            observed_at = batch.observations[i].observed_at
            if latest is not None and observed_at <= latest:
                late.append(RawKey(host.workspace_id, host_id, observed_at))
    return await neighbourhoods(conn, late) if late else {}


def _drop_stored_duplicates(batch: _Batch, neighbours: dict[PointKey, Neighbourhood]) -> None:
    for host_id, idxs in batch.pending.items():
        for i in list(idxs):
            place = neighbours.get((host_id, batch.observations[i].observed_at))
            if place is not None and place.stored:
                batch.settle(i, Outcome.DUPLICATE)


def _group(
    batch: _Batch, neighbours: dict[PointKey, Neighbourhood], gpu_cache: dict[GpuKey, GpuInfo]
) -> tuple[list[_IntervalGroup], list[_NewestState]]:
    """Each host's new points, as ticks, grouped by the stored interval they land in.

    A point with no stored neighbourhood is newer than its host's newest observation,
    so its interval opens there. Also returns each host's new newest state, if any.
    """
    groups: list[_IntervalGroup] = []
    newest: list[_NewestState] = []
    for host_id, idxs in batch.pending.items():
        if not idxs:
            continue
        host = batch.hosts[host_id]
        ordered = sorted((batch.observations[i] for i in idxs), key=lambda o: o.observed_at)
        ids = {
            g.uuid: gpu_cache[(host_id, g.uuid)].gpu_id for o in ordered for g in o.snapshot.gpus
        }
        group: _IntervalGroup | None = None
        for o in ordered:
            place = neighbours.get((host_id, o.observed_at))
            before, after = (
                (place.before, place.after)
                if place is not None
                else (host.latest_observed_at, None)
            )
            if group is None or (before, after) != (group.before, group.after):
                group = _IntervalGroup(host, before, after, [])
                groups.append(group)
            group.ticks.append(tick_of(o, ids))
        if host.latest_observed_at is None or ordered[-1].observed_at > host.latest_observed_at:
            newest.append(_NewestState(ordered[-1], groups[-1].ticks[-1]))
    return groups, newest


async def _credit(
    conn: psycopg.AsyncConnection[Any],
    groups: list[_IntervalGroup],
    booked: ReservationDelta,
    jobs: JobDelta,
) -> RollupDelta:
    """Every group's interval changes in one delta, and the same changes to the figures
    of the bookings they fall in (`booked`, board.reservations.crediting) and of the
    jobs' GPUs and the time outside jobs (`jobs`, board.jobs.crediting).

    The usual opener is the host's newest tick, on its row; any other is read back from
    the raw samples (one round trip for the batch, only when there is one). The bookings
    were read in the lock's round trip (_batch_spans).
    """
    to_read = sorted(
        {
            RawKey(group.host.workspace_id, group.host.host_id, group.before)
            for group in groups
            if group.before is not None and group.tick_on_row() is None
        }
    )
    stored_ticks = await load_ticks(conn, to_read)
    delta = RollupDelta()
    for group in groups:
        after_us = to_us(group.after) if group.after is not None else None
        opener = _opener(group, stored_ticks)
        delta.credit_insertion(opener, group.ticks, after_us, group.host.gaps)
        booked.credit_insertion(opener, group.ticks, after_us, group.host.gaps)
        jobs.credit_insertion(opener, group.ticks, after_us, group.host.gaps)
    return delta


def _batch_spans(observations: Sequence[Observation]) -> list[HostSpan]:
    """Per host, in lock order, its first and last new point (the bookings read widens
    them by the widest maxSampleGap: no interval the batch changes reaches further)."""
    spans: dict[tuple[int, int], tuple[datetime, datetime]] = {}
    for o in observations:
        key = (o.workspace_id, o.host_id)
        known = spans.get(key)
        lo, hi = (o.observed_at, o.observed_at) if known is None else known
        spans[key] = (min(lo, o.observed_at), max(hi, o.observed_at))
    return [HostSpan(ws, host, lo, hi) for (ws, host), (lo, hi) in sorted(spans.items())]


def _opener(group: _IntervalGroup, stored_ticks: dict[PointKey, Tick]) -> Tick | None:
    """The tick that opens the group's stored interval (None: nothing stored before)."""
    if group.before is None:
        return None
    on_row = group.tick_on_row()
    if on_row is not None:
        return decode_tick(group.host.host_id, to_us(group.before), on_row)
    return stored_ticks.get((group.host.host_id, group.before))


async def _advance_newest(
    conn: psycopg.AsyncConnection[Any], newest: list[_NewestState], kept: KeptTicks
) -> None:
    """Move each host's newest state forward: its pointer, status, errors and tick (with
    each GPU's stateSince, board.ingest.state_since)."""
    if not newest:
        return
    await conn.execute(
        """
        UPDATE hosts h SET
            latest_observed_at = u.observed_at,
            latest_received_at = u.received_at,
            latest_collection_status = u.status,
            latest_errors = string_to_array(u.errors, chr(31)),
            latest_tick = u.tick,
            hostname = u.hostname,
            agent_version = u.agent_version,
            driver_version = u.driver_version
        FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[], %s::timestamptz[],
                    %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[])
             AS u(ws, host_id, observed_at, received_at, status, errors, tick, hostname,
                  agent_version, driver_version)
        WHERE h.workspace_id = u.ws AND h.id = u.host_id
        """,
        [
            int_array(o.workspace_id for o, _ in newest),
            int_array(o.host_id for o, _ in newest),
            text_array(o.observed_at.isoformat() for o, _ in newest),
            text_array(o.received_at.isoformat() for o, _ in newest),
            text_array(o.snapshot.collectionStatus for o, _ in newest),
            # Arrays of arrays must be rectangular; join each host's codes instead.
            text_array(chr(31).join(o.snapshot.errors) for o, _ in newest),
            text_array(kept.tick_for(o.host_id, t) for o, t in newest),
            text_array(o.snapshot.host.hostname for o, _ in newest),
            text_array(o.snapshot.host.agentVersion for o, _ in newest),
            text_array(o.snapshot.host.driverVersion for o, _ in newest),
        ],
    )
