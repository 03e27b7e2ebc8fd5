"""Group commit: concurrent pushes share one transaction, each still waits for its commit.

A push is answered 202 only after the transaction holding its rows has committed.
While one batch is being written the next requests queue up, so under load batches
grow by themselves and the cost of a commit is shared by every request in it.

Two writer tasks take turns: one *prepares* a batch (takes what is queued, locks its
hosts, computes the rows and rollup deltas) while the other's writes and COMMIT are in
flight, never both at once. Batches stay as large as with a single writer (less CPU per
observation than two free-running writers), and the commit round trip, with its WAL
flush, no longer holds up the next batch (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, date
from typing import Any, NamedTuple

import psycopg
from psycopg_pool import AsyncConnectionPool

from board.errors import as_unavailable
from board.ingest.gpuids import GpuInfo, GpuKey, TooManyGpus
from board.ingest.normalize import Observation
from board.ingest.store import Outcome, store_batch
from board.jobs.batch import JobGpuCache
from board.metrics.registry import ingest_batch_size, ingest_commit_seconds
from board.observations.maintenance import create_days, existing_partitions

log = logging.getLogger(__name__)


class _Queued(NamedTuple):
    """An observation waiting for its batch, and its request waiting for the outcome."""

    observation: Observation
    answer: asyncio.Future[Outcome]


class _Turn:
    """A writer's turn at preparing a batch; handed on once, however the batch ends."""

    def __init__(self, lock: asyncio.Lock) -> None:
        self._lock: asyncio.Lock | None = lock

    def hand_on(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


class IngestWriter:
    def __init__(self, pool: AsyncConnectionPool[Any], max_batch: int = 256, writers: int = 2):
        self._pool = pool
        self._max_batch = max_batch
        self._writers = writers
        self._queue: asyncio.Queue[_Queued] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._gpu_cache: dict[GpuKey, GpuInfo] = {}
        self._job_cache: JobGpuCache = {}
        self._partition_days: set[date] | None = None
        self._partition_lock = asyncio.Lock()
        self._preparing = asyncio.Lock()

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run()) for _ in range(self._writers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def submit(self, observation: Observation) -> Outcome:
        if not self._tasks:
            raise RuntimeError("ingest writer is not running")
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Queued(observation, future))
        return await future

    async def _run(self) -> None:
        while True:
            await self._preparing.acquire()
            turn = _Turn(self._preparing)
            try:
                batch = [await self._queue.get()]
                while len(batch) < self._max_batch and not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                await self._write(batch, turn.hand_on)
                # Not kept alive (snapshots and all) while waiting for the next batch.
                del batch
            finally:
                turn.hand_on()

    async def _write(
        self, batch: list[_Queued], prepared: Callable[[], None] | None = None
    ) -> None:
        try:
            outcomes = await self._transaction([item.observation for item in batch], prepared)
        except Exception as exc:
            if as_unavailable(exc) is not None:
                # The database is away (or cannot answer now): each push is answered
                # 503 at once, where retrying them one by one would make each wait for
                # a connection in turn. The agents keep them and push them again.
                log.warning("storing %d observation(s) failed: %s", len(batch), exc)
                for item in batch:
                    if not item.answer.done():
                        item.answer.set_exception(exc)
                return
            if len(batch) == 1:
                log.exception("storing an observation failed")
                if not batch[0].answer.done():
                    batch[0].answer.set_exception(exc)
                return
            # One bad item must not fail its neighbours: retry each alone.
            for item in batch:
                await self._write([item])
            return
        for item, outcome in zip(batch, outcomes, strict=True):
            if item.answer.done():
                continue
            if isinstance(outcome, TooManyGpus):
                item.answer.set_exception(outcome)
            else:
                item.answer.set_result(outcome)

    async def _transaction(
        self, observations: list[Observation], prepared: Callable[[], None] | None
    ) -> list[Outcome | TooManyGpus]:
        days = {o.observed_at.astimezone(UTC).date() for o in observations}
        await self._ensure_partitions(days)
        try:
            started = time.perf_counter()
            async with self._pool.connection() as conn:
                outcomes = await store_batch(
                    conn, observations, self._gpu_cache, prepared, self._job_cache
                )
            ingest_commit_seconds.observe(time.perf_counter() - started)
            ingest_batch_size.observe(len(observations))
            return outcomes
        except psycopg.Error as exc:
            if not missing_partition(exc):
                raise
        # The remembered days were wrong: a partition was dropped since, or made by hand
        # and lost. Make the batch's days and write once more. The turn to prepare was
        # handed on before the failed write, so the other writer is not held up.
        log.warning("ingest: a day's partition was missing; creating it and retrying")
        self._partition_days = None
        await self._ensure_partitions(days)
        async with self._pool.connection() as conn:
            return await store_batch(conn, observations, self._gpu_cache, prepared, self._job_cache)

    async def _ensure_partitions(self, days: set[date]) -> None:
        """Partitions normally exist already (maintenance); this covers a lagging schedule.

        The days known to exist are remembered, so the normal case asks nothing.
        """
        if self._partition_days is not None and days <= self._partition_days:
            return
        async with self._partition_lock:
            async with self._pool.connection() as conn:
                await conn.set_autocommit(True)
                try:
                    if self._partition_days is None or not days <= self._partition_days:
                        have = await existing_partitions(conn)
                        known = set.intersection(*have.values())
                        missing = sorted(days - known)
                        if missing:
                            await create_days(conn, missing)
                        self._partition_days = known | set(missing)
                finally:
                    await conn.set_autocommit(False)

    def forget_partitions(self) -> None:
        """After maintenance dropped or created partitions elsewhere."""
        self._partition_days = None


def missing_partition(exc: psycopg.Error) -> bool:
    """PostgreSQL's "no partition of relation … found for row" (a check violation)."""
    return exc.sqlstate == "23514" and "no partition of relation" in str(exc)
