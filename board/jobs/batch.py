"""The job GPUs an ingest batch credits, kept between batches by the writer.

Every batch needs, for each of its hosts, the job GPUs around its new points and whether
the host is a cluster host (board.jobs.crediting). They change only when a record does
(or a GPU's numbers, or the cluster), while a host pushes every 30 s; reading them again
for every batch cost 0.9 ms of PostgreSQL a batch, more than any write but two
(docs/benchmarks.md). So the writer keeps each host's as a `HostJobGpus`, stamped with
`host_allocation_versions.version`, which triggers move on every such change (migration
"allocations version"), and each batch asks, in its lock's round trip, only for the
hosts whose copy is missing, out of date, or does not reach back far enough: the answer
is empty when nothing changed.

A host's copy holds every run of it that has not ended by `window_lo_us` (the batch's
first point less the widest maxSampleGap and an hour of slack for late points), running
ones and ones not yet started included, so any later batch whose points reach no
further back is served from it. Ranges that ended since stay in it until the next
change; crediting clips every piece to its range, so they count for nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from board.db.pgtext import bigint_array, int_array, text_array
from board.jobs.crediting import JobDelta, JobGpuRange, OutsideView
from board.jobs.store import US_OF_END, US_OF_START, Span, job_gpu_range
from board.rollups.gaps import WIDEST_SQL

# Late points older than the batch's first (a spool replayed) still find their runs.
_SLACK = "interval '1 hour'"


@dataclass(slots=True)
class HostJobGpus:
    """One host's job GPUs as the crediting needs them, and what they were read for."""

    version: int  # the host's allocation version they were read at (0: none yet)
    window_lo_us: int  # runs that ended at or before it were not read
    # The crediting's structures, made once per read: shared by every batch's delta,
    # which never changes them in place (JobDelta copies a list before adding to it).
    by_gpu: dict[int, list[tuple[JobGpuRange, int]]] = field(default_factory=dict)
    view_ranges: dict[tuple[int, str], list[tuple[int, int]]] = field(default_factory=dict)
    workspace_of_job: dict[int, int] = field(default_factory=dict)
    since_us: int | None = None  # a cluster host's since; None: not one
    _seen: set[tuple[int, int]] = field(default_factory=set)

    def add(self, job_gpu: JobGpuRange) -> None:
        """Each (run, GPU) once, as board.jobs.store.job_gpu_ranges reads them."""
        if (job_gpu.job_id, job_gpu.gpu_id) in self._seen:
            return
        self._seen.add((job_gpu.job_id, job_gpu.gpu_id))
        self.by_gpu.setdefault(job_gpu.gpu_id, []).append((job_gpu, 1))
        self.view_ranges.setdefault((job_gpu.gpu_id, job_gpu.linux_user), []).append(
            (job_gpu.start_us, job_gpu.end_us)
        )
        self.workspace_of_job[job_gpu.job_id] = job_gpu.workspace_id


JobGpuCache = dict[int, HostJobGpus]  # host id -> its job GPUs
# Never read: a host not kept yet.
_UNKNOWN_VERSION = -1

# For each span whose host's copy is stale (version moved) or too short (the span reaches
# back past its window), the host's version, the new window, its cluster since and its
# runs not ended by then, matched to GPUs; a host with no run answers one row of NULLs.
_STALE_JOB_GPUS = f"""
    SELECT s.host_id, coalesce(v.version, 0), {{WINDOW_US}}, ch.since_us,
           r.workspace_id, r.job_id, r.gpu_id, r.start_us, r.end_us, r.linux_user,
           r.raw_job_id
    FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[], %s::bigint[], %s::bigint[])
         AS s(ws, host_id, lo, known_version, known_lo_us)
    JOIN workspaces w ON w.id = s.ws
    CROSS JOIN LATERAL (
        SELECT s.lo - make_interval(secs => {WIDEST_SQL}) - {_SLACK} AS window_lo
    ) AS win
    LEFT JOIN host_allocation_versions v ON v.workspace_id = s.ws AND v.host_id = s.host_id
    LEFT JOIN LATERAL (
        SELECT (extract(epoch FROM c.since) * 1000000)::bigint AS since_us
        FROM cluster_hosts c WHERE c.workspace_id = s.ws AND c.host_id = s.host_id
    ) AS ch ON true
    LEFT JOIN LATERAL (
        SELECT jg.workspace_id, jg.job_id, g.id AS gpu_id, {US_OF_START} AS start_us,
               {US_OF_END} AS end_us, jg.linux_user, j.raw_job_id
        FROM job_gpus jg
        JOIN gpus g ON g.workspace_id = jg.workspace_id AND g.host_id = jg.host_id
                   AND coalesce(g.minor_number, g.gpu_index) = jg.device
        JOIN scheduler_jobs j ON j.workspace_id = jg.workspace_id AND j.id = jg.job_id
        WHERE jg.workspace_id = s.ws AND jg.host_id = s.host_id
          AND (upper(jg.during) > win.window_lo OR upper_inf(jg.during))
        OFFSET 0
    ) AS r ON true
    WHERE coalesce(v.version, 0) <> s.known_version
       OR {{LO_US}} < s.known_lo_us
"""
_STALE_JOB_GPUS = _STALE_JOB_GPUS.replace(
    "{WINDOW_US}", "(extract(epoch FROM win.window_lo) * 1000000)::bigint"
).replace("{LO_US}", f"(extract(epoch FROM s.lo - make_interval(secs => {WIDEST_SQL})) * 1000000)")


class PendingJobs:
    """The job GPUs of an ingest batch, asked for in its lock's round trip."""

    def __init__(
        self,
        cache: JobGpuCache,
        assumed: dict[int, HostJobGpus],
        cursor: psycopg.AsyncCursor[Any] | None,
    ) -> None:
        self._cache = cache
        self._assumed = assumed  # the copies the question took as current, by host
        self._cursor = cursor

    async def delta(self) -> JobDelta:
        """A delta crediting every batch host's job GPUs (and judging outside time)."""
        found = dict(self._assumed)
        if self._cursor is not None:
            for host_id, kept in _read(await self._cursor.fetchall()).items():
                found[host_id] = self._cache[host_id] = kept
        return _delta_of(found)


def _read(rows: Sequence[tuple[Any, ...]]) -> dict[int, HostJobGpus]:
    read: dict[int, HostJobGpus] = {}
    for host_id, version, window_us, since_us, ws, job_id, gpu_id, start, end, user, raw in rows:
        kept = read.get(host_id)
        if kept is None:
            kept = read[host_id] = HostJobGpus(int(version), int(window_us))
            kept.since_us = None if since_us is None else int(since_us)
        if job_id is not None:
            kept.add(job_gpu_range(ws, job_id, host_id, gpu_id, start, end, user, raw))
    for kept in read.values():
        for ranges in kept.view_ranges.values():
            ranges.sort()
    return read


def _delta_of(kept: dict[int, HostJobGpus]) -> JobDelta:
    delta = JobDelta()
    view = OutsideView()
    for host_id, host in kept.items():
        delta.allocations.update(host.by_gpu)
        delta.workspace_of_job.update(host.workspace_of_job)
        view.ranges.update(host.view_ranges)
        if host.since_us is not None:
            view.since[host_id] = host.since_us
    delta.add_view(view)
    return delta


async def ask_batch_jobs(
    conn: psycopg.AsyncConnection[Any], spans: Sequence[Span], cache: JobGpuCache
) -> PendingJobs:
    """Send (in the caller's pipeline, after its host lock) the question for the hosts
    whose kept job GPUs may not serve the batch; fetch nothing yet. `spans`: each host's
    (workspace, host, first new point, last)."""
    if not spans:
        return PendingJobs(cache, {}, None)
    assumed = {s[1]: cache[s[1]] for s in spans if s[1] in cache}
    versions = [assumed[s[1]].version if s[1] in assumed else _UNKNOWN_VERSION for s in spans]
    windows = [assumed[s[1]].window_lo_us if s[1] in assumed else 0 for s in spans]
    cursor = await conn.execute(
        _STALE_JOB_GPUS,
        [
            int_array(s[0] for s in spans),
            int_array(s[1] for s in spans),
            text_array(s[2].isoformat() for s in spans),
            bigint_array(versions),
            bigint_array(windows),
        ],
    )
    return PendingJobs(cache, assumed, cursor)
