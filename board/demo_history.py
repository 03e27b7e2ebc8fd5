"""The demo's past: weeks of its simulated hosts' telemetry, written as the board writes any.

Every observation is the agent's own payload (board.demo.SimHost.observation), checked
by the same SnapshotIn model as a push and stored by the same ingest writer, which
credits the hourly rollups with the same code `rollups rebuild` replays: so the demo's
figures equal a rebuild, and an archive back-fill does no differently. Only the HTTP
round trip is skipped (the writer is handed the observations, as the archive worker
does), so four weeks of six hosts take seconds, not minutes.

The step is coarse for the weeks (one observation every 15 minutes; the demo workspace's
maxSampleGap is 20 minutes, so that is observed time, not gaps) and fine for the last
hours (one a minute), which the charts show closely. The live pushes take over at the
instant the history ends, so the two read as one story.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from board.ingest.normalize import Observation
from board.ingest.schemas import SnapshotIn
from board.ingest.store import Outcome

if TYPE_CHECKING:
    from board.runtime import Runtime

HISTORY = timedelta(days=28)
COARSE_STEP = timedelta(minutes=15)
FINE_FOR = timedelta(hours=6)
FINE_STEP = timedelta(minutes=1)
# The demo workspace's maxSampleGapSeconds: the coarse step and some, from the beginning.
MAX_GAP_SECONDS = 1200
CHUNK = 512  # observations built, then handed to the writer together (its batches)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ceil(moment: datetime, step: timedelta) -> datetime:
    """The first multiple of `step` (counted from the epoch) at or after `moment`."""
    over = (moment - _EPOCH) % step
    return moment if not over else moment + (step - over)


def instants(start: datetime, end: datetime, fine_from: datetime) -> Iterator[datetime]:
    """Coarse steps from `start` until `fine_from`, fine ones until before `end`.

    On whole multiples of the step, so a rerun lands on the same instants (deduplicated).
    """
    at = _ceil(start, COARSE_STEP)
    while at < min(fine_from, end):
        yield at
        at += COARSE_STEP
    at = _ceil(max(at, start, fine_from), FINE_STEP)
    while at < end:
        yield at
        at += FINE_STEP


class SimulatedHost(Protocol):
    """What a simulated host's agent would push at an instant (board.demo.SimHost)."""

    def observation(self, at: datetime) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Span:
    """One host's history to write: [start, end)."""

    host: SimulatedHost
    key: tuple[int, int]  # (workspace id, host id), as the agent token authenticates
    start: datetime
    end: datetime


def plan(spans: Sequence[Span], fine_from: datetime) -> list[tuple[Span, datetime]]:
    """Every (host, instant), oldest first: each host's series arrives in order."""
    pairs = [(s, at) for s in spans for at in instants(s.start, s.end, fine_from)]
    pairs.sort(key=lambda pair: pair[1])
    return pairs


def _observations(pairs: Sequence[tuple[Span, datetime]], received: datetime) -> list[Observation]:
    """What the hosts' agents would have pushed, validated as a push is."""
    found = []
    for span, at in pairs:
        body = json.dumps(span.host.observation(at))
        snapshot = SnapshotIn.model_validate_json(body)
        workspace_id, host_id = span.key
        found.append(Observation(workspace_id, host_id, snapshot.observed_at(), received, snapshot))
    return found


async def write_history(runtime: Runtime, spans: Sequence[Span], fine_from: datetime) -> int:
    """Store the spans through the ingest writer; how many observations were new."""
    pairs = plan(spans, fine_from)
    received = datetime.now(UTC)
    stored = 0
    for i in range(0, len(pairs), CHUNK):
        chunk = await asyncio.to_thread(_observations, pairs[i : i + CHUNK], received)
        outcomes = await asyncio.gather(*(runtime.writer.submit(o) for o in chunk))
        stored += sum(1 for outcome in outcomes if outcome is Outcome.STORED)
    return stored
