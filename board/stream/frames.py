"""The fleet's live frames: a workspace's hosts, the newest sample of each, sent as one
compact Server-Sent Event per tick that is encoded once and written, as the same bytes,
to every viewer of the workspace in this process.

A frame is `event: frame` with JSON data
`{"seq", "key", "t", "hosts": [[index, hostId, [gpu uuid, ...]], ...],
"rows": [[index, ageMs, [utilPct, ...], [memoryUsedMb, ...]], ...]}`:

- `hosts` is the host table: a keyframe (`key: true`) lists every host the view knows and
  replaces whatever the viewer had; a delta lists only hosts new to the table or whose
  GPUs changed. Rows name hosts by index, so a host's id and its GPUs' UUIDs (most of a
  keyframe's bytes) are sent once, not every second.
- `rows` are the newest samples: every host in a keyframe, only the hosts whose sample
  changed in a delta. The values follow the table's GPU order.
- `t` is the board's clock when the frame was built (epoch seconds); `ageMs` is `t` minus
  the agent's sample time, so the sample's own time is `t - ageMs / 1000`.

Who gets what, each tick: a viewer that took its last frame gets the tick's delta (the
same bytes for all of them); a new viewer gets a keyframe. A viewer that has not taken
its last frame by the next tick lags: that frame is replaced (the board holds at most one
frame per viewer, never a backlog) by a catch-up delta with every change since the frame
it last took, encoded once for all the viewers that last took the same one; a viewer too
far behind for that (CATCH_UP_TICKS) gets a keyframe. Hosts quiet for longer than the
kept window leave the table when a check every KEYFRAME_TICKS finds some; the table is
then numbered afresh and every viewer gets a keyframe.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import replace
from typing import Any

from board.stream.samples import Sample

# A sample waits at most one tick before it is framed: half a second keeps the time from
# the agent to the page under a second with the rest of the way (about 0.1 s) included.
TICK_SECONDS = 0.5
KEYFRAME_TICKS = 60  # how often (30 s) hosts gone quiet are looked for
CATCH_UP_TICKS = 20  # a viewer 10 s behind gets a keyframe rather than a catch-up

_Row = tuple[int, Sample]


def _event(data: dict[str, Any]) -> bytes:
    body = json.dumps(data, separators=(",", ":"))
    return b"event: frame\ndata: " + body.encode() + b"\n\n"


class FleetViewer:
    """One viewer of a workspace's frames: at most one frame waiting for it, the newest."""

    __slots__ = ("_ready", "lagged", "pending", "pending_seq", "taken_seq")

    def __init__(self) -> None:
        self.pending: bytes | None = None
        self.pending_seq = -1
        self.taken_seq = -1  # the frame the viewer last took (-1: none; it needs a keyframe)
        self.lagged = 0  # frames replaced before this viewer took them
        self._ready = asyncio.Event()

    def put(self, frame: bytes, seq: int) -> None:
        if self.pending is not None:
            self.lagged += 1
        self.pending = frame
        self.pending_seq = seq
        self._ready.set()

    async def get(self) -> bytes:
        while self.pending is None:
            self._ready.clear()
            await self._ready.wait()
        frame, self.pending = self.pending, None
        self.taken_seq = self.pending_seq
        return frame


class FleetView:
    """One workspace's fleet in one process, while someone there watches it."""

    def __init__(self, workspace_id: int, horizon: float) -> None:
        self.workspace_id = workspace_id
        self.horizon = horizon  # seconds a quiet host stays in the table
        self.viewers: set[FleetViewer] = set()
        self.seq = 0
        self.stats: dict[str, int] = {"keyframes": 0, "deltas": 0, "catch_ups": 0, "bytes": 0}
        self._newest: dict[str, Sample] = {}
        self._index: dict[str, int] = {}  # hostId -> its place in the host table
        self._gpus: dict[str, tuple[str, ...]] = {}  # hostId -> GPU UUIDs as the table has them
        self._changed: dict[str, None] = {}  # hosts with a new sample since the last tick
        # Each tick since the table was numbered: (seq, hosts with a new sample, hosts whose
        # table entry changed), for catching a lagging viewer up.
        self._ticks: deque[tuple[int, tuple[str, ...], tuple[str, ...]]] = deque(
            maxlen=CATCH_UP_TICKS
        )
        self._numbered = 0  # the seq at which the table was last numbered

    # -- in ----------------------------------------------------------------------
    def touch(self, sample: Sample) -> None:
        """A host's sample arrived: it is the host's newest unless an older or a repeat."""
        host = sample.host_id
        known = self._newest.get(host)
        if known is not None:
            if sample.ts < known.ts:
                return
            if sample.ts == known.ts:
                # One sample NOTIFYed in parts (Sample.payloads): its GPUs, joined.
                have = {g[0] for g in known.gpus}
                more = tuple(g for g in sample.gpus if g[0] not in have)
                if not more:
                    return
                sample = replace(known, gpus=known.gpus + more)
        self._newest[host] = sample
        self._changed[host] = None

    # -- out ---------------------------------------------------------------------
    def tick(self, now: float | None = None) -> None:
        """This tick's frames, handed to every viewer."""
        now = time.time() if now is None else now
        self.seq += 1
        everyone = self.seq % KEYFRAME_TICKS == 0 and self._forget_quiet()
        changed, entries = self._advance()
        key: bytes | None = None
        delta: bytes | None = None
        catch_ups: dict[int, bytes | None] = {}
        for viewer in self.viewers:
            frame: bytes | None
            if everyone or viewer.taken_seq < 0:
                frame = None  # a keyframe, below
            elif viewer.pending is None:
                if not (changed or entries):
                    continue  # nothing new for it
                if delta is None:
                    delta = self._delta(now, changed, entries)
                frame = delta
            else:  # it lags
                base = viewer.taken_seq
                if base not in catch_ups:
                    catch_ups[base] = self._catch_up(now, base)
                frame = catch_ups[base]
            if frame is None:
                if key is None:
                    key = self._keyframe(now)
                frame = key
            viewer.put(frame, self.seq)

    def _forget_quiet(self) -> bool:
        """Drops hosts quiet for longer than the horizon and numbers the table afresh
        (every viewer then needs a keyframe); False when no host was quiet that long."""
        horizon = time.monotonic() - self.horizon
        if all(s.received >= horizon for s in self._newest.values()):
            return False
        self._newest = {h: s for h, s in self._newest.items() if s.received >= horizon}
        self._index = {host: i for i, host in enumerate(self._newest)}
        self._gpus = {h: tuple(g[0] for g in s.gpus) for h, s in self._newest.items()}
        self._changed.clear()
        self._ticks.clear()
        self._numbered = self.seq
        return True

    def _advance(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """This tick's changes into the table: hosts with a new sample, hosts whose table
        entry (new, or new GPUs) changed."""
        entries: list[str] = []
        for host in self._changed:
            if host not in self._index:
                self._index[host] = len(self._index)
            uuids = tuple(g[0] for g in self._newest[host].gpus)
            if self._gpus.get(host) != uuids:
                self._gpus[host] = uuids
                entries.append(host)
        changed = tuple(self._changed)
        self._changed.clear()
        self._ticks.append((self.seq, changed, tuple(entries)))
        return changed, tuple(entries)

    def _entries(self, hosts: Any) -> list[list[Any]]:
        return [[self._index[h], h, list(self._gpus[h])] for h in hosts]

    def _rows(self, hosts: Any) -> list[_Row]:
        return [(self._index[h], self._newest[h]) for h in hosts]

    def _keyframe(self, now: float) -> bytes:
        self.stats["keyframes"] += 1
        return self._frame(True, now, self._entries(self._index), self._rows(self._index))

    def _delta(self, now: float, changed: tuple[str, ...], entries: tuple[str, ...]) -> bytes:
        self.stats["deltas"] += 1
        return self._frame(False, now, self._entries(entries), self._rows(changed))

    def _catch_up(self, now: float, base: int) -> bytes | None:
        """Every change after frame `base`, as one delta; None when the ticks kept do not
        reach back that far (or the table was numbered since): a keyframe then."""
        if base < self._numbered or not self._ticks or self._ticks[0][0] > base + 1:
            return None
        changed: dict[str, None] = {}
        entries: dict[str, None] = {}
        for seq, hosts, new in self._ticks:
            if seq > base:
                changed.update(dict.fromkeys(hosts))
                entries.update(dict.fromkeys(new))
        self.stats["catch_ups"] += 1
        return self._frame(False, now, self._entries(entries), self._rows(changed))

    def _frame(self, key: bool, now: float, entries: list[list[Any]], rows: list[_Row]) -> bytes:
        frame = _event(
            {
                "seq": self.seq,
                "key": key,
                "t": round(now, 3),
                "hosts": entries,
                "rows": [
                    [
                        i,
                        round((now - s.ts) * 1000),
                        [g[1] for g in s.gpus],
                        [g[2] for g in s.gpus],
                    ]
                    for i, s in rows
                ],
            }
        )
        self.stats["bytes"] += len(frame)
        return frame
