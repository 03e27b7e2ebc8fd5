"""The live utilization stream of one board process, joined to every other by PostgreSQL.

An agent's WebSocket lands on one process; the browsers watching its workspace may be
on any. So a process never hands a sample to its own subscribers directly: it NOTIFYs
it on one channel, and every process (itself included) LISTENs on one dedicated
connection and fans what arrives out to its subscribers of that sample's workspace.
Each process also keeps the last few minutes in memory, so a page that opens shows
the recent curve at once. Nothing of the stream is stored: it is for live graphs.

A workspace's fleet view (board/stream/frames.py) is not sent sample by sample: while a
process has viewers of it, a ticker frames what changed twice a second, once, and every
viewer there gets the same bytes.

The same connection carries other channels a process must hear (the agent-access
seam's revocations, board/ingest/access.py: `listen_also`), and it proves itself alive
once a second, so whoever trusts it for invalidations can tell when not to
(`listener_epoch`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Annotated, Any

import psycopg
from fastapi import Depends
from psycopg import sql
from psycopg_pool import AsyncConnectionPool
from starlette.requests import HTTPConnection

from board.stream.frames import TICK_SECONDS, FleetView, FleetViewer
from board.stream.samples import HostHistory, Sample

log = logging.getLogger(__name__)

CHANNEL = "gua_stream"
SUBSCRIBER_QUEUE = 1000
PUBLISH_QUEUE = 10_000
# A listener that hears nothing for this long asks its connection for a `SELECT 1`: a
# connection that died without an error would otherwise look like a quiet one.
PROBE_SECONDS = 1.0
PROBE_TIMEOUT_SECONDS = 2.0


class Subscription:
    """One browser's view: samples of one workspace (optionally one host), newest kept."""

    def __init__(self, workspace_id: int, host_id: str | None) -> None:
        self.workspace_id = workspace_id
        self.host_id = host_id
        self.lost = 0  # samples dropped because the browser read too slowly
        self._queue: asyncio.Queue[Sample] = asyncio.Queue(SUBSCRIBER_QUEUE)

    def offer(self, sample: Sample) -> None:
        if self.host_id is not None and sample.host_id != self.host_id:
            return
        if self._queue.full():
            self._queue.get_nowait()
            self.lost += 1
        self._queue.put_nowait(sample)

    async def get(self) -> Sample:
        return await self._queue.get()


class StreamHub:
    def __init__(self, keep_seconds: float = 300) -> None:
        self.keep_seconds = keep_seconds
        self.stats: dict[str, int] = defaultdict(int)
        self._subscribers: dict[int, set[Subscription]] = defaultdict(set)
        self._recent: dict[int, dict[str, HostHistory]] = defaultdict(dict)
        self._fleets: dict[int, FleetView] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._outbox: asyncio.Queue[Sample] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._listening = asyncio.Event()
        self._pool: AsyncConnectionPool[Any] | None = None
        self._conninfo = ""
        self._handlers: dict[str, Callable[[str], None]] = {}
        self._on_change: list[Callable[[], None]] = []
        self._epoch = 0
        self._live = False
        self.listener_pid: int | None = None  # the listener's backend, for operators and tests

    # -- other channels on the listener connection -------------------------------
    def listen_also(self, channel: str, handler: Callable[[str], None]) -> None:
        """LISTEN on `channel` too (call before start); `handler` gets each payload."""
        self._handlers[channel] = handler

    def on_listener_change(self, callback: Callable[[], None]) -> None:
        """Called whenever the listener connects or is lost."""
        self._on_change.append(callback)

    def listener_epoch(self) -> int | None:
        """None while not listening, else a number that changes with every (re)connect.

        Whatever was cached under one epoch may have missed notifications sent while
        the listener was away, so it is only good while the epoch stays the same.
        """
        return self._epoch if self._live else None

    def _set_live(self, live: bool) -> None:
        if live == self._live:
            return
        if live:
            self._epoch += 1
        self._live = live
        if live:
            self._listening.set()
        else:
            self._listening.clear()
        for callback in self._on_change:
            try:
                callback()
            except Exception:
                log.exception("stream: listener change callback failed")

    # -- lifecycle ---------------------------------------------------------------
    async def start(self, conninfo: str, pool: AsyncConnectionPool[Any]) -> None:
        """Start listening and publishing; never fails start-up (it retries instead)."""
        self._conninfo = conninfo
        self._pool = pool
        self._outbox = asyncio.Queue(PUBLISH_QUEUE)
        self._tasks = [
            asyncio.create_task(self._listen(), name="stream-listen"),
            asyncio.create_task(self._publish(), name="stream-publish"),
        ]

    async def stop(self) -> None:
        if self._ticker is not None:
            self._tasks.append(self._ticker)
            self._ticker = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self._set_live(False)

    async def wait_listening(self, timeout: float) -> bool:
        with suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._listening.wait()
        return self._listening.is_set()

    # -- in ----------------------------------------------------------------------
    def publish(self, sample: Sample) -> None:
        """Send a sample to every process's subscribers (never blocks the agent's socket)."""
        self.stats["published"] += 1
        if self._outbox is None:
            self.deliver(sample)  # not started (a bare app in a test): this process only
            return
        if self._outbox.full():
            self.stats["publish_overflow"] += 1
            return
        self._outbox.put_nowait(sample)

    async def _publish(self) -> None:
        assert self._outbox is not None
        assert self._pool is not None
        while True:
            batch = [await self._outbox.get()]
            while not self._outbox.empty() and len(batch) < 500:
                batch.append(self._outbox.get_nowait())
            payloads = [p for s in batch for p in s.payloads()]
            try:
                async with self._pool.connection() as conn:
                    await conn.execute(
                        "SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p",
                        [CHANNEL, payloads],
                    )
            except asyncio.CancelledError:
                raise
            except Exception:
                # Without the database, this process's own browsers still get them.
                log.exception("stream: NOTIFY failed; delivering locally only")
                self.stats["notify_failures"] += 1
                for sample in batch:
                    self.deliver(sample)

    async def _listen(self) -> None:
        backoff = 1.0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as conn:
                    for channel in (CHANNEL, *self._handlers):
                        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    self.listener_pid = conn.info.backend_pid
                    self._set_live(True)
                    backoff = 1.0
                    while True:
                        async for notify in conn.notifies(timeout=PROBE_SECONDS):
                            self._dispatch(notify.channel, notify.payload)
                        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow the
                        # cancellation of stop(), and this loop would never end.
                        async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
                            await conn.execute("SELECT 1")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("stream: listener lost (%s); reconnecting in %.0fs", exc, backoff)
            finally:
                self._set_live(False)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30.0)

    def _dispatch(self, channel: str, payload: str) -> None:
        if channel != CHANNEL:
            handler = self._handlers.get(channel)
            if handler is not None:
                try:
                    handler(payload)
                except Exception:
                    log.exception("stream: handler of channel %s failed", channel)
            return
        sample = Sample.from_payload(payload)
        if sample is None:
            self.stats["bad_notifications"] += 1
            return
        self.deliver(sample)

    # -- out ---------------------------------------------------------------------
    def deliver(self, sample: Sample) -> None:
        """A sample arrived (from any process): remember it, hand it to subscribers."""
        self.stats["delivered"] += 1
        hosts = self._recent[sample.workspace_id]
        history = hosts.get(sample.host_id)
        if history is None:
            # Bounded by count too, whatever a misbehaving agent sends.
            history = hosts[sample.host_id] = HostHistory(
                sample.host_id, int(self.keep_seconds * 5)
            )
        history.append(sample)
        history.expire(time.monotonic() - self.keep_seconds)
        for sub in self._subscribers.get(sample.workspace_id, ()):
            sub.offer(sample)
        fleet = self._fleets.get(sample.workspace_id)
        if fleet is not None:
            fleet.touch(sample)

    def _histories(self, workspace_id: int) -> Iterator[HostHistory]:
        """The workspace's hosts that streamed within the kept window (others forgotten)."""
        hosts = self._recent.get(workspace_id, {})
        horizon = time.monotonic() - self.keep_seconds
        for key, history in list(hosts.items()):
            history.expire(horizon)
            if not len(history):
                del hosts[key]
                continue
            yield history

    def recent(self, workspace_id: int, host_id: str | None = None) -> list[Sample]:
        """The kept samples of a workspace (or one of its hosts), oldest first per host."""
        out: list[Sample] = []
        for history in self._histories(workspace_id):
            if host_id is None or history.host_id == host_id:
                out.extend(history.samples(workspace_id))
        return out

    def newest(self, workspace_id: int) -> list[Sample]:
        """Each host's newest kept sample."""
        return [h.newest for h in self._histories(workspace_id) if h.newest is not None]

    @contextmanager
    def subscribe(self, workspace_id: int, host_id: str | None = None) -> Iterator[Subscription]:
        sub = Subscription(workspace_id, host_id)
        self._subscribers[workspace_id].add(sub)
        try:
            yield sub
        finally:
            self._subscribers[workspace_id].discard(sub)
            if not self._subscribers[workspace_id]:
                del self._subscribers[workspace_id]

    # -- the fleet's frames ------------------------------------------------------
    @contextmanager
    def subscribe_fleet(self, workspace_id: int) -> Iterator[FleetViewer]:
        """A viewer of the workspace's fleet frames (its first frame: a keyframe)."""
        view = self._fleets.get(workspace_id)
        if view is None:
            view = self._fleets[workspace_id] = FleetView(workspace_id, self.keep_seconds)
            for sample in self.newest(workspace_id):
                view.touch(sample)
        viewer = FleetViewer()
        view.viewers.add(viewer)
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._tick(), name="stream-fleet-ticker")
        try:
            yield viewer
        finally:
            view.viewers.discard(viewer)
            if not view.viewers and self._fleets.get(workspace_id) is view:
                del self._fleets[workspace_id]

    def fleet_view(self, workspace_id: int) -> FleetView | None:
        """The workspace's view while this process has viewers of it (for tests, metrics)."""
        return self._fleets.get(workspace_id)

    async def _tick(self) -> None:
        """Frames every workspace with viewers each TICK_SECONDS; ends when none is left."""
        loop = asyncio.get_running_loop()
        due = loop.time()
        while self._fleets:
            due += TICK_SECONDS
            late = loop.time() - due
            if late > TICK_SECONDS:
                due += late  # a busy loop skips ticks rather than bunching them
            else:
                await asyncio.sleep(max(0.0, -late))
            now = time.time()
            for view in list(self._fleets.values()):
                try:
                    view.tick(now)
                except Exception:
                    log.exception("stream: framing workspace %d failed", view.workspace_id)
                    self.stats["frame_failures"] += 1
            self.stats["ticks"] += 1


async def stream_hub(connection: HTTPConnection) -> StreamHub:
    """This process's hub, built by the composition root (board.runtime)."""
    hub: StreamHub = connection.app.state.runtime.stream
    return hub


HubDep = Annotated[StreamHub, Depends(stream_hub)]
