"""Crediting again what a changed job record changes, from the raw samples stored.

Like a moved booking (board.reservations.service `recredit`): the changed runs' old
ranges are un-credited and their new ones credited in one replay of each affected host's
stored observations around where they differ (widened to whole hours); everything
outside cancels out. Every run of the host is replayed under both views, not only the
changed ones: an hour wholly inside a run that no other run touches is kept on the
GPU-hour row, so a run that starts or stops sharing an hour moves its neighbour's. Time
outside jobs is judged against every job of the host, so it is taken back under the old
view (all the host's job GPUs and its cluster `since`, as before the record) and credited
under the new one. The hosts are locked first, in key order, as an ingest batch locks
them, so a batch and a record change of one host never interleave.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from board.hosts.locks import lock_hosts
from board.jobs.crediting import JobDelta, JobGpuRange, OutsideView
from board.jobs.store import load_cluster_since, load_job_gpus, upsert_job_delta
from board.rollups.allocated import OPEN_END_US
from board.rollups.crediting import HOUR_US, from_us, to_us
from board.rollups.gaps import GapSchedule, load_schedule
from board.rollups.rebuild import host_ticks

# Past any observation: where a running job's range, or a new cluster host's, reaches.
_FAR = datetime(9000, 1, 1, tzinfo=UTC)


def _at(us: int) -> datetime:
    return _FAR if us >= OPEN_END_US else from_us(us)


async def lock_job_hosts(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, host_ids: set[int]
) -> None:
    """Lock the hosts in key order (board.hosts.locks), as ingest does."""
    if host_ids:
        await lock_hosts(
            conn, "h.id", "h.workspace_id = %s AND h.id = ANY(%s)", [workspace_id, sorted(host_ids)]
        )


async def recredit_runs(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    before: Sequence[JobGpuRange],
    after: Sequence[JobGpuRange],
    *,
    since_before: Mapping[int, datetime | None] | None = None,
) -> None:
    """Credit the difference between the changed runs' GPUs `before` and `after` a
    record (all in the store already as `after`) to the intervals stored.

    `since_before`: the hosts whose cluster `since` the record may have changed, with
    what it was (None: not a cluster host then); the new one is read.
    """
    old_since = dict(since_before or {})
    unchanged = set(before) & set(after)
    gone = [r for r in before if r not in unchanged]
    new = [r for r in after if r not in unchanged]
    hosts = {r.host_id for r in gone} | {r.host_id for r in new} | set(old_since)
    if not hosts:
        return
    await lock_job_hosts(conn, workspace_id, hosts)
    gaps = await load_schedule(conn, workspace_id)
    gap = timedelta(microseconds=gaps.widest_us)
    for host_id in sorted(hosts):
        await _recredit_host(
            conn,
            workspace_id,
            host_id,
            [r for r in gone if r.host_id == host_id],
            [r for r in new if r.host_id == host_id],
            old_since,
            gap,
            gaps,
        )


async def _recredit_host(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_id: int,
    gone: list[JobGpuRange],
    new: list[JobGpuRange],
    old_since: dict[int, datetime | None],
    gap: timedelta,
    gaps: GapSchedule,
) -> None:
    # Where the two views differ: the changed ranges, and a moved `since`.
    edges = [r.start_us for r in gone + new] + [r.end_us for r in gone + new]
    since_now = await load_cluster_since(conn, workspace_id, [host_id])
    was, now = old_since.get(host_id), since_now.get(host_id)
    if host_id in old_since and was != now:
        edges += [to_us(t) for t in (was, now) if t is not None]
        if was is None or now is None:
            edges.append(OPEN_END_US)  # a host that became (or left) a cluster host
    if not edges:
        return
    # Whole hours: where an hour's figures are kept depends on every run that touches it
    # (board.jobs.crediting), so a changed edge may move a neighbour's whole hour.
    lo_us = min(edges) // HOUR_US * HOUR_US
    hi_us = max(edges) if max(edges) >= OPEN_END_US else -(-max(edges) // HOUR_US) * HOUR_US
    lo, hi = _at(lo_us) - gap, _at(hi_us) + gap
    ticks = await host_ticks(conn, workspace_id, host_id, lo, hi)
    if len(ticks) < 2:
        return
    current, _ = await load_job_gpus(conn, [(workspace_id, host_id, lo, hi)])
    changed = {(r.job_id, r.gpu_id) for r in new}
    previous = [r for r in current if (r.job_id, r.gpu_id) not in changed] + gone
    # The host's old view taken back and its new one credited, every run of both: the
    # runs that did not change cancel out, but where an hour of theirs now goes.
    delta = JobDelta()
    for r in previous:
        delta.add_job_gpu(r, -1)
    for r in current:
        delta.add_job_gpu(r, 1)
    delta.add_view(_view(previous, was if host_id in old_since else now, host_id), -1)
    delta.add_view(_view(current, now, host_id), 1)
    delta.credit_series(ticks, gaps)
    await upsert_job_delta(conn, delta, {host_id: workspace_id})


def _view(ranges: Sequence[JobGpuRange], since: datetime | None, host_id: int) -> OutsideView:
    view = OutsideView({host_id: to_us(since)} if since is not None else {})
    for r in ranges:
        view.add(r)
    return view
