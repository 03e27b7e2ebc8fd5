"""A board process's notice workers: the detector on a short clock and the delivery loop.

Every process runs both. Detection is safe that way (a per-workspace advisory lock, and
at most one open episode per subject in the table); delivery too (claims with SKIP
LOCKED). Tests drive them directly: `detect_once(now)` and `deliver_due()`.

Delivery has DELIVERY_SLOTS sends in flight at most, each its own task that records its
own outcome and frees its slot when it ends, and the claim gives one workspace at most
outbox.PER_WORKSPACE of them: a receiver that accepts and never answers holds only its
own workspace's few slots until the attempt's deadline, never another workspace's
notice (a batch that waited for its slowest send delayed everyone by a whole timeout).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from board.errors import as_unavailable
from board.metrics.registry import notices_pass_failures
from board.notices import outbox
from board.notices.budget_watch import watch_budgets
from board.notices.detect import (
    PassResult,
    WorkspaceRow,
    detect_workspace,
    try_lock,
    workspaces,
)
from board.notices.digest import send_if_due
from board.notices.senders import Outcome
from board.settings import Settings

log = logging.getLogger(__name__)

# Sends in flight at once in one process (each holds a slot until its attempt ends).
DELIVERY_SLOTS = 16


class Notices:
    def __init__(
        self,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        pool: AsyncConnectionPool[Any],
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.pool = pool
        self._tasks: list[asyncio.Task[None]] = []
        self._in_flight: set[asyncio.Task[None]] = set()

    @property
    def mail(self) -> bool:
        return self.settings.smtp_url is not None

    @property
    def lease_seconds(self) -> float:
        # An attempt may take up to 3x the timeout (mail); its lease must outlast it.
        return max(self.settings.notices_lease_seconds, 4 * self.settings.notices_timeout_seconds)

    async def detect_once(self, now: datetime | None = None) -> dict[str, PassResult]:
        """One pass over every workspace not being looked at by another process."""
        now = now or datetime.now(UTC)
        async with self.sessions() as session:
            found = await workspaces(session)
        results: dict[str, PassResult] = {}
        for ws in found:
            # Each workspace is its own unit: one whose data or settings make the pass
            # raise is logged, counted and retried next pass; the others still get theirs.
            try:
                result = await self._detect_workspace(ws, now)
            except Exception:
                notices_pass_failures.labels(stage="detect").inc()
                log.exception(
                    "notices: the pass over workspace %d failed; next pass retries", ws.id
                )
                continue
            if result is not None:
                results[ws.slug] = result
        return results

    async def _detect_workspace(self, ws: WorkspaceRow, now: datetime) -> PassResult | None:
        """One workspace's episodes and digest in one transaction; None if another
        process is looking at it."""
        async with self.sessions() as session, session.begin():
            if not await try_lock(session, ws.id):
                return None
            result = await detect_workspace(
                session, ws, now, public_url=self.settings.public_url, mail=self.mail
            )
            # Budgets in a savepoint of their own too: a look that fails is retried.
            try:
                async with session.begin_nested():
                    await watch_budgets(
                        session, ws, now, public_url=self.settings.public_url, mail=self.mail
                    )
            except Exception:
                notices_pass_failures.labels(stage="budgets").inc()
                log.exception(
                    "notices: the budgets of workspace %d failed; next pass retries", ws.id
                )
            # A digest that cannot be made must not cost the workspace its episodes'
            # notices: a savepoint, rolled back alone (its day stays untaken: retried).
            try:
                async with session.begin_nested():
                    await send_if_due(session, ws, result.seen, now, mail=self.mail)
            except Exception:
                notices_pass_failures.labels(stage="digest").inc()
                log.exception(
                    "notices: the digest of workspace %d failed; next pass retries", ws.id
                )
            return result

    async def deliver_due(self) -> int:
        """Claim what the free slots allow, send each on its own, and wait for those sends
        (each recorded as it ends); how many were tried."""
        started = await self._start_due()
        if started:
            await asyncio.wait(started)
        return len(started)

    async def _start_due(self) -> list[asyncio.Task[None]]:
        free = DELIVERY_SLOTS - len(self._in_flight)
        if free <= 0:
            return []
        async with self.pool.connection() as conn:
            await conn.set_autocommit(True)
            try:
                claimed = await outbox.claim(conn, free, self.lease_seconds)
            finally:
                await conn.set_autocommit(False)  # the pool's other users expect transactions
        started = []
        for delivery in claimed:
            task = asyncio.create_task(self._send(delivery), name=f"notice-{delivery.id}")
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
            started.append(task)
        return started

    async def _send(self, delivery: outbox.Claimed) -> None:
        """One claimed delivery: attempt, then record at once (its slot frees as it ends)."""
        try:
            outcome = await outbox.attempt(self.settings, delivery)
        except Exception as exc:
            log.warning("notices: delivery %s failed: %r", delivery.id, exc)
            outcome = Outcome(False, retry=True, response="Internal error.")
        try:
            async with self.pool.connection() as conn:
                await conn.set_autocommit(True)
                try:
                    await outbox.record(conn, self.settings, delivery, outcome)
                finally:
                    await conn.set_autocommit(False)
        except Exception:
            # Unrecorded, the claim expires with its lease and the row is sent again.
            log.exception("notices: could not record delivery %s", delivery.id)

    async def _wait_for_slot(self, seconds: float) -> None:
        """Until a send ends (a slot frees) or `seconds` pass."""
        if self._in_flight:
            await asyncio.wait(
                set(self._in_flight), timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
        else:
            await asyncio.sleep(seconds)

    async def _detect_loop(self) -> None:
        while True:
            try:
                await self.detect_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if as_unavailable(exc) is None:
                    log.exception("notices: detection failed; will retry")
                else:  # one line per try while the database is away, not a traceback
                    log.warning("notices: detection waits for the database (%s)", exc)
            await asyncio.sleep(self.settings.notices_detect_seconds)

    async def _deliver_loop(self) -> None:
        while True:
            try:
                if await self._start_due():
                    continue  # more may be due, and slots may be free
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if as_unavailable(exc) is None:
                    log.exception("notices: delivery loop failed; will retry")
                else:
                    log.warning("notices: delivery waits for the database (%s)", exc)
            # Nothing due, or every slot taken: a send that ends frees one at once.
            await self._wait_for_slot(self.settings.notices_poll_seconds)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._detect_loop(), name="notices-detect"),
            asyncio.create_task(self._deliver_loop(), name="notices-deliver"),
        ]

    async def stop(self) -> None:
        # Sends cut short stay claimed until their lease ends, then go again (at least once).
        tasks = [*self._tasks, *self._in_flight]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with suppress(asyncio.CancelledError):
                await task
        self._tasks = []
