"""The tick loop: collect, build, deliver, on a drift-free monotonic schedule."""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType
from typing import Any, Protocol

from agent.model import Collection
from agent.payload import HostIdentity, build_observation, encode_observation
from agent.sender import Outcome, Sender
from agent.usage import UsageTracker

log = logging.getLogger(__name__)

ERROR_COLLECTION_FAILED = "collection_failed"


class Collector(Protocol):
    """What the runner needs from `NvmlCollector` and `FakeCollector`."""

    def collect(self, observed_at: datetime | None = None) -> Collection: ...

    def close(self) -> None: ...


def take_snapshot(
    collector: Collector,
    host: HostIdentity,
    tracker: UsageTracker,
    observed_at: datetime,
    now: float,
) -> dict[str, Any]:
    """Collect, apply usage states and build the payload; `now` is monotonic seconds."""
    try:
        collection = collector.collect(observed_at)
    except Exception:
        # A bug or an unexpected NVML shape must not kill the agent: say so, keep ticking.
        log.exception("collection failed")
        collection = Collection.failed(ERROR_COLLECTION_FAILED)
    return build_observation(tracker.apply(collection, now), host, observed_at)


class _Abandon(BaseException):
    """Raised from a signal handler to abandon a request that is on the wire."""


class Runner:
    """Runs ticks every `interval` seconds on the grid start + k·interval (monotonic clock).

    Work never shifts the schedule: each tick's sends are bounded by the next tick's
    deadline, and a tick that overran anyway skips the grid points it missed rather
    than firing a burst to catch up.
    """

    def __init__(
        self,
        collector: Collector,
        sender: Sender,
        host: HostIdentity,
        *,
        interval: float,
        tracker: UsageTracker | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.collector = collector
        self.sender = sender
        self.host = host
        self.interval = interval
        # push-once passes UsageTracker(0, 0): the contract's single-tick rule.
        self.tracker = tracker if tracker is not None else UsageTracker()
        self.stop = sender.stop
        self._monotonic = monotonic
        self._wall = wall
        self.ticks = 0
        self.last_outcome: Outcome | None = None

    def snapshot(self) -> bytes:
        """Collect once and return the encoded payload."""
        payload = take_snapshot(
            self.collector, self.host, self.tracker, self._wall(), self._monotonic()
        )
        return encode_observation(payload)

    def tick(self, deadline: float) -> Outcome:
        """One tick: collect and deliver, with sends bounded by `deadline` (monotonic)."""
        self.ticks += 1
        self.last_outcome = self.sender.deliver(self.snapshot(), deadline)
        return self.last_outcome

    def run(self, max_ticks: int | None = None) -> None:
        """Tick until stopped (or `max_ticks`); on the way out, spool what was not sent."""
        start = self._monotonic()
        k = 0
        try:
            while not self.stop.is_set() and (max_ticks is None or self.ticks < max_ticks):
                due = start + k * self.interval
                delay = due - self._monotonic()
                if delay > 0 and self.stop.wait(delay):
                    break
                try:
                    self.tick(due + self.interval)
                except _Abandon:
                    break
                k += 1
                behind = math.ceil((self._monotonic() - start) / self.interval)
                if behind > k:
                    log.warning("tick overran; skipping %d missed tick(s)", behind - k)
                    k = behind
        finally:
            if self.sender.pending is not None:
                self.last_outcome = self.sender.spool_pending()

    @contextmanager
    def signals_handled(self) -> Iterator[None]:
        """SIGTERM/SIGINT stop the loop; a request on the wire is abandoned and spooled."""

        def handle(signum: int, _frame: FrameType | None) -> None:
            log.info("received %s; stopping", signal.Signals(signum).name)
            self.stop.set()
            if self.sender.in_request:
                raise _Abandon

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.signal(s, handle) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
