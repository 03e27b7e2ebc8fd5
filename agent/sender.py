"""Delivery of snapshots: retries with backoff inside a tick's budget, the spool, and its drain."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from agent.client import Answer, BoardClient
from agent.jobspool import JobSpool
from agent.spool import Spool

log = logging.getLogger(__name__)

Outcome = Literal["sent", "dropped", "spooled", "lost"]

# Below this many seconds of budget a request is not worth starting (ticks go down to 200 ms).
MIN_REQUEST_BUDGET = 0.05
# A spooled snapshot that gets a 5xx this many times, each time while the board
# accepted a fresh one in the same tick, is taken to be what the board chokes on.
MAX_REPLAY_FAILURES = 5


class HostRevoked(Exception):
    """The board answered 401: this host's agent token is no longer valid."""


@dataclass(slots=True)
class Backoff:
    """Capped exponential backoff with jitter: attempt n waits U(0.5, 1) × min(cap, base × 2ⁿ⁻¹)."""

    base: float = 1.0
    cap: float = 60.0
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, failures: int) -> float:
        raw = min(self.cap, self.base * 2 ** max(0, failures - 1))
        return float(raw * self.rng.uniform(0.5, 1.0))


class Sender:
    """Sends a tick's snapshot and then replays the spool, oldest first, in the same budget.

    The fresh snapshot goes first so the board sees the host alive at once; the board
    counts by `observedAt`, so the replay arriving after it changes no figure. Job
    records the Prolog and Epilog could not send (`job_spool`) go next, before the
    replay of old snapshots, in the order they were spooled. The
    backoff state lives across ticks: while the board is failing, a tick whose next
    attempt is not due before its deadline spools the snapshot without a request.
    """

    def __init__(
        self,
        client: BoardClient,
        spool: Spool,
        *,
        backoff: Backoff | None = None,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        job_spool: JobSpool | None = None,
    ) -> None:
        self.client = client
        self.spool = spool
        self.job_spool = job_spool
        self.backoff = backoff or Backoff()
        self.stop = stop or threading.Event()
        self._clock = clock
        self._failures = 0
        self._next_attempt_at = 0.0
        self._replay_failures: dict[str, int] = {}
        # The fresh snapshot until it has been answered or spooled (for shutdown).
        self.pending: bytes | None = None
        # True while a request is on the wire, so a signal handler may abandon it.
        self.in_request = False

    def deliver(self, body: bytes, deadline: float) -> Outcome:
        """Send `body`, retrying until `deadline` (monotonic), else spool it; then drain."""
        self.pending = body
        answer = self._send_with_retries(body, deadline)
        if answer.kind == "unauthorized":
            self.pending = None
            raise HostRevoked(answer.message)
        if answer.kind == "retry":
            return self.spool_pending()
        self.pending = None
        if answer.kind == "rejected":
            log.error("the board rejected a snapshot (%s); dropped", answer.message)
        if answer.kind == "accepted":
            self.send_jobs(deadline)
        self.drain(deadline, fresh_accepted=answer.kind == "accepted")
        return "sent" if answer.kind == "accepted" else "dropped"

    def send_jobs(self, deadline: float) -> int:
        """Send the spooled job records, oldest first, until the deadline; how many were
        sent. Skipped while a Prolog or Epilog is sending them itself (it holds the lock)."""
        if self.job_spool is None or self.stop.is_set():
            return 0
        try:
            result = self.job_spool.drain(
                self._post_jobs, deadline, wait_for_lock=False, clock=self._clock
            )
        except OSError as exc:
            log.error("the job spool %s cannot be sent (%s)", self.job_spool.directory, exc)
            return 0
        return result.sent

    def _post_jobs(self, body: bytes, budget: float) -> Answer:
        if self.stop.is_set():
            return Answer("retry", None, "shutting down")
        self.in_request = True
        try:
            return self.client.post_jobs(body, budget=budget)
        finally:
            self.in_request = False

    def spool_pending(self) -> Outcome:
        """Put the unanswered fresh snapshot, if any, into the spool."""
        body, self.pending = self.pending, None
        if body is None:
            return "spooled"
        try:
            return "spooled" if self.spool.put(body) is not None else "lost"
        except OSError as exc:
            log.error("could not spool a snapshot in %s: %s", self.spool.directory, exc)
            return "lost"

    def drain(self, deadline: float, *, fresh_accepted: bool = False) -> int:
        """Replay the spool oldest first until the deadline or a failure; returns how many."""
        self.spool.prune()
        done = 0
        for entry in self.spool.entries():
            budget = deadline - self._clock()
            if self.stop.is_set() or budget < MIN_REQUEST_BUDGET:
                break
            body = self.spool.read(entry)
            if body is None:
                continue
            answer = self._post(body, budget)
            if answer.kind == "unauthorized":
                raise HostRevoked(answer.message)
            if answer.kind == "retry":
                self._note_failure(answer)
                if fresh_accepted and answer.status is not None and answer.status >= 500:
                    self._count_replay_failure(entry.name, answer)
                break
            if answer.kind == "rejected":
                log.warning(
                    "the board rejected spooled snapshot %s (%s); dropped",
                    entry.name,
                    answer.message,
                )
            self._replay_failures.pop(entry.name, None)
            self.spool.remove(entry)
            done += 1
        if done:
            log.info("replayed %d spooled snapshot(s)", done)
        return done

    def _send_with_retries(self, body: bytes, deadline: float) -> Answer:
        last = Answer("retry", None, "not sent")
        while not self.stop.is_set():
            now = self._clock()
            if now < self._next_attempt_at:
                if self._next_attempt_at > deadline - MIN_REQUEST_BUDGET:
                    return last
                self.stop.wait(self._next_attempt_at - now)
                continue
            budget = deadline - now
            if budget < MIN_REQUEST_BUDGET:
                return last
            last = self._post(body, budget)
            if last.kind != "retry":
                return last
            self._note_failure(last)
        return Answer("retry", None, "shutting down")

    def _post(self, body: bytes, budget: float) -> Answer:
        self.in_request = True
        try:
            answer = self.client.post_observation(body, budget=budget)
        finally:
            self.in_request = False
        if answer.kind != "retry" and self._failures:
            log.info("the board answers again (%s)", answer.message)
            self._failures = 0
            self._next_attempt_at = 0.0
        return answer

    def _note_failure(self, answer: Answer) -> None:
        self._failures += 1
        wait = answer.retry_after
        if wait is None:
            wait = self.backoff.delay(self._failures)
        self._next_attempt_at = self._clock() + wait
        level = logging.WARNING if self._failures == 1 else logging.DEBUG
        log.log(
            level,
            "board not reachable (%s); next try in %.1fs, spooling meanwhile",
            answer.message,
            wait,
        )

    def _count_replay_failure(self, name: str, answer: Answer) -> None:
        count = self._replay_failures.get(name, 0) + 1
        self._replay_failures[name] = count
        if count < MAX_REPLAY_FAILURES:
            return
        log.error(
            "spooled snapshot %s failed %d times (%s) while fresh ones were accepted; dropped",
            name,
            count,
            answer.message,
        )
        self._replay_failures.pop(name, None)
        for entry in self.spool.entries():
            if entry.name == name:
                self.spool.remove(entry)
