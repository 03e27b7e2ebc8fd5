"""The back-fill worker: one asyncio task per board process, jobs claimed from the database.

Jobs live in archive_backfills, so every process sees the same queue: a job is claimed
with FOR UPDATE SKIP LOCKED, keeps a heartbeat while it runs, and is taken over by any
process once its heartbeat is older than the lease (its process died). Observations
go through the process's IngestWriter, the same path as a live push: the same
(host, observedAt) dedupe, the same re-splitting of intervals, the same rollups.
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any, BinaryIO

from psycopg_pool import AsyncConnectionPool

from board.archives.backfill import (
    OVER_GPU_LIMIT,
    Converter,
    Device,
    GpuBudget,
    MissingDevice,
    Planner,
    Progress,
    TickReader,
    to_int,
)
from board.archives.csvfile import MAX_DEVICE_ROWS, ArchiveReader, Limits
from board.archives.storage import ArchiveStore, make_store, open_object
from board.errors import DomainError, as_unavailable
from board.ingest.store import Outcome
from board.rollups.crediting import to_us
from board.settings import Settings

if TYPE_CHECKING:
    from board.ingest.normalize import Observation
    from board.ingest.writer import IngestWriter

log = logging.getLogger(__name__)

LEASE_SECONDS = 300
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Job:
    workspace_id: int
    host_id: int
    day: date
    attempts: int


class JobFailed(Exception):
    """A back-fill that cannot succeed by retrying (the reason is shown on the host)."""


class Archives:
    """The process's archive store and back-fill worker.

    It takes the process's parts it uses, not the process's runtime (which builds it):
    the raw pool for its own statements, the ingest writer that stores back-filled ticks
    exactly as live pushes, and the settings.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        settings: Settings,
        writer: IngestWriter,
        store: ArchiveStore | None = None,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.writer = writer
        self.store = store or make_store(settings)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="archive-backfill")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def kick(self) -> None:
        """Look for work now (after an upload committed), not at the next poll."""
        self._wake.set()

    async def _loop(self) -> None:
        poll = self.settings.backfill_poll_seconds
        while True:
            self._wake.clear()
            try:
                job = await self._claim()
                if job is not None:
                    await self.run(job)
                    continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if as_unavailable(exc) is None:
                    log.exception("archive back-fill worker failed; retrying")
                else:  # one line per poll while the database is away, not a traceback
                    log.warning("archive back-fill waits for the database (%s)", exc)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            # that lands as the event fires, and stop() would then wait forever.
            with suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await self._wake.wait()

    async def _execute(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchall() if cur.description else []

    async def _claim(self) -> Job | None:
        rows = await self._execute(
            """
            UPDATE archive_backfills b
            SET status = 'running', attempts = b.attempts + 1, run_seq = b.requested_seq,
                devices_changed = false,
                started_at = now(), heartbeat_at = now(), finished_at = NULL, reason = NULL
            FROM (SELECT workspace_id, host_id, day FROM archive_backfills
                  WHERE (status = 'pending' AND (not_before IS NULL OR not_before <= now()))
                     OR (status = 'running'
                         AND heartbeat_at < now() - make_interval(secs => %(lease)s))
                  ORDER BY requested_at
                  LIMIT 1
                  FOR UPDATE SKIP LOCKED) j
            WHERE (b.workspace_id, b.host_id, b.day) = (j.workspace_id, j.host_id, j.day)
            RETURNING b.workspace_id, b.host_id, b.day, b.attempts
            """,
            {"lease": LEASE_SECONDS},
        )
        return Job(*rows[0]) if rows else None

    async def run(self, job: Job) -> None:
        """Back-fill one host-day and record how it went."""
        progress = Progress()
        try:
            if job.attempts > MAX_ATTEMPTS:
                raise JobFailed(f"gave up after {MAX_ATTEMPTS} attempts")
            await self._backfill(job, progress)
        except MissingDevice as exc:
            await self._finish(
                job,
                progress,
                "waiting",
                f"waiting for the gpu_device archive: no name or memory total for GPU "
                f"{exc.uuid!r} yet",
            )
        except JobFailed as exc:
            await self._finish(job, progress, "failed", str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("back-fill of host %s day %s failed", job.host_id, job.day)
            retry = job.attempts < MAX_ATTEMPTS
            await self._finish(
                job,
                progress,
                "pending" if retry else "failed",
                f"{type(exc).__name__}: {exc}",
                retry_in=timedelta(seconds=60 * job.attempts) if retry else None,
            )
        else:
            await self._finish(job, progress, "done", None)

    async def _backfill(self, job: Job, progress: Progress) -> None:
        settings = self.settings
        keys = {
            (table, day): key
            for table, day, key in await self._execute(
                """
                SELECT table_name, day, storage_key FROM archive_objects
                WHERE workspace_id = %(w)s AND host_id = %(h)s
                  AND (day = %(day)s OR day = '_full')
                """,
                {"w": job.workspace_id, "h": job.host_id, "day": job.day.isoformat()},
            )
        }
        day_text = job.day.isoformat()
        gpu_key = keys.get(("gpu_sample", day_text))
        proc_key = keys.get(("proc_sample", day_text))
        if gpu_key is None or proc_key is None:
            raise JobFailed("the day's gpu_sample or proc_sample archive is no longer stored")
        hosts = await self._execute(
            """
            SELECT h.hostname, h.display_name, h.agent_version, h.driver_version,
                   h.revoked_at, w.max_gpus_per_host
            FROM hosts h JOIN workspaces w ON w.id = h.workspace_id
            WHERE h.workspace_id = %(w)s AND h.id = %(h)s
            """,
            {"w": job.workspace_id, "h": job.host_id},
        )
        if not hosts or hosts[0][4] is not None:
            raise JobFailed("the host was revoked")
        hostname, display_name, agent_version, driver_version, _, max_gpus = hosts[0]
        host = {
            "hostname": (hostname or display_name or "unknown")[:255],
            "agentVersion": (agent_version or "unknown")[:64],
            "driverVersion": (driver_version or "unknown")[:64],
        }
        limits = Limits.of(settings)
        board_gpus = await self._board_gpus(job)
        devices = await self._devices(board_gpus, keys.get(("gpu_device", "_full")), limits)
        tolerance_us = settings.archive_match_tolerance_ms * 1000
        stored = await self._stored_times(job, tolerance_us)
        now = datetime.now(UTC)
        sources: list[BinaryIO] = []
        try:
            sources.append(await open_object(self.store, gpu_key))
            sources.append(await open_object(self.store, proc_key))

            def plan() -> Planner:
                reader = TickReader(sources[0], sources[1], limits)
                converter = Converter(
                    devices, devices_complete=("gpu_device", "_full") in keys, host=host
                )
                return Planner(
                    reader,
                    converter,
                    workspace_id=job.workspace_id,
                    host_id=job.host_id,
                    stored_us=stored,
                    tolerance_us=tolerance_us,
                    oldest=now - timedelta(days=settings.raw_retention_days),
                    received_at=now,
                    progress=progress,
                    gpu_budget=GpuBudget(set(board_gpus), int(max_gpus)),
                )

            planner = await asyncio.to_thread(plan)
            while chunk := await asyncio.to_thread(planner.next_chunk, settings.ingest_max_batch):
                await self._store_chunk(chunk, progress)
                del chunk  # not held while the next one is read
                await self._heartbeat(job, progress)
        finally:
            for source in sources:
                source.close()

    async def _store_chunk(self, chunk: list[Observation], progress: Progress) -> None:
        """Write a chunk through the live path's writer; count what became of each tick."""
        outcomes = await asyncio.gather(
            *(self.writer.submit(o) for o in chunk), return_exceptions=True
        )
        failure: BaseException | None = None
        for observation, outcome in zip(chunk, outcomes, strict=True):
            if outcome is Outcome.STORED:
                progress.added += 1
            elif outcome is Outcome.DUPLICATE:
                progress.skip("already_stored")
            elif outcome is Outcome.REVOKED:
                failure = failure or JobFailed("the host was revoked")
            elif isinstance(outcome, DomainError):
                # The write path refused this tick. Its GPU limit (checked there too, as a
                # live push may have added GPUs since the planner counted) is a skip.
                if outcome.extra.get("reason") == "too_many_gpus":
                    progress.skip(OVER_GPU_LIMIT)
                else:
                    progress.error(f"{observation.snapshot.observedAt}: {outcome.detail}")
            elif isinstance(outcome, BaseException):
                failure = failure or outcome
            else:  # an outcome this worker does not know: counted under its name
                progress.skip(str(getattr(outcome, "value", outcome)))
        if failure is not None:
            raise failure

    async def _board_gpus(self, job: Job) -> dict[str, Device]:
        """The GPUs the board has for the host (they count against its GPU limit)."""
        return {
            uuid: Device(name, total, index)
            for uuid, index, name, total in await self._execute(
                """
                SELECT uuid, gpu_index, name, memory_total_mb FROM gpus
                WHERE workspace_id = %(w)s AND host_id = %(h)s
                """,
                {"w": job.workspace_id, "h": job.host_id},
            )
        }

    async def _devices(
        self, board_gpus: dict[str, Device], device_key: str | None, limits: Limits
    ) -> dict[str, Device]:
        """Names and totals: the board's GPU rows, overlaid by the agent's gpu_device table."""
        devices = dict(board_gpus)
        if device_key is None:
            return devices
        source = await open_object(self.store, device_key)

        def parse() -> dict[str, Device]:
            reader = ArchiveReader(source, limits)
            at = {n: reader.columns.index(n) for n in ("gpu_uuid", "name", "memory_total_mb")}
            found: dict[str, Device] = {}
            for row in reader:
                if reader.rows > MAX_DEVICE_ROWS:
                    raise JobFailed(
                        f"the gpu_device archive lists more than {MAX_DEVICE_ROWS} GPUs"
                    )

                def cell(name: str, row: list[str] = row) -> str:
                    i = at[name]
                    return row[i] if i is not None else ""

                uuid = cell("gpu_uuid")
                known = devices.get(uuid)
                try:
                    total = to_int(cell("memory_total_mb"))
                except ValueError:
                    total = None
                found[uuid] = Device(
                    cell("name") or (known.name if known else None),
                    total or (known.memory_total_mb if known else None),
                    known.index if known else None,
                )
            return found

        try:
            devices.update(await asyncio.to_thread(parse))
        finally:
            source.close()
        return devices

    async def _stored_times(self, job: Job, margin_us: int) -> list[int]:
        start = datetime.combine(job.day, time(), UTC) - timedelta(microseconds=margin_us)
        end = start + timedelta(days=1, microseconds=2 * margin_us)
        rows = await self._execute(
            """
            SELECT observed_at FROM raw_observations(%(w)s, %(h)s, %(start)s, %(end)s)
            WHERE observed_at < %(end)s
            ORDER BY observed_at
            """,
            {"w": job.workspace_id, "h": job.host_id, "start": start, "end": end},
        )
        return [to_us(r[0]) for r in rows]

    async def _heartbeat(self, job: Job, progress: Progress) -> None:
        await self._execute(
            """
            UPDATE archive_backfills SET heartbeat_at = now(), rows_read = %(rows)s,
                ticks = %(ticks)s, added = %(added)s, skipped = %(skipped)s,
                skipped_reasons = %(reasons)s::jsonb, errors = %(errors)s,
                error_samples = %(samples)s::jsonb
            WHERE workspace_id = %(w)s AND host_id = %(h)s AND day = %(day)s
              AND status = 'running'
            """,
            self._counters(job, progress),
        )

    @staticmethod
    def _counters(job: Job, progress: Progress) -> dict[str, Any]:
        return {
            "w": job.workspace_id,
            "h": job.host_id,
            "day": job.day,
            "rows": progress.rows_read,
            "ticks": progress.ticks,
            "added": progress.added,
            "skipped": progress.skipped,
            "reasons": json.dumps(dict(progress.skipped_reasons)),
            "errors": progress.errors,
            "samples": json.dumps(progress.error_samples),
        }

    async def _finish(
        self,
        job: Job,
        progress: Progress,
        status: str,
        reason: str | None,
        retry_in: timedelta | None = None,
    ) -> None:
        """Record the result; an upload that arrived meanwhile queues the day again."""
        params = self._counters(job, progress)
        params.update(
            status=status,
            reason=reason if reason is None or len(reason) <= 500 else reason[:499] + "…",
            not_before=datetime.now(UTC) + retry_in if retry_in else None,
        )
        await self._execute(
            """
            UPDATE archive_backfills SET
                status = CASE WHEN requested_seq > run_seq THEN 'pending'
                              WHEN %(status)s = 'waiting' AND devices_changed THEN 'pending'
                              ELSE %(status)s END,
                reason = %(reason)s, not_before = %(not_before)s,
                finished_at = now(), heartbeat_at = now(), rows_read = %(rows)s,
                ticks = %(ticks)s, added = %(added)s, skipped = %(skipped)s,
                skipped_reasons = %(reasons)s::jsonb, errors = %(errors)s,
                error_samples = %(samples)s::jsonb
            WHERE workspace_id = %(w)s AND host_id = %(h)s AND day = %(day)s
              AND status = 'running'
            """,
            params,
        )
        self.kick()  # the day may have been queued again meanwhile
