"""The fleet's live frames: a workspace's hosts, the newest sample of each, sent as one
compact Server-Sent Event per tick that is encoded once and written, as the same bytes,
to every viewer of the workspace in this process.

A frame is `event: frame` with JSON data
`{"seq", "key", "t", "hosts": [[index, hostId, [gpu uuid, ...]], ...],
"rows": [[index, ageMs, [utilPct, ...], [memoryUsedMb, ...]], ...]}`:

- `hosts` is the host table: a keyframe (`key: true`) lists every host the view knows and
  replaces whatever the viewer had; a delta lists only hosts new to the table or whose
  GPUs changed. Rows name hosts by index, so a host's id and its GPUs' UUIDs are sent
  once, not every second.
- `rows` are the newest samples: every host in a keyframe, only the hosts whose sample
  changed since the last tick in a delta. The values follow the table's GPU order.
- `t` is the board's clock when the frame was built (epoch seconds); `ageMs` is `t` minus
  the agent's sample time, so the sample's own time is `t - ageMs / 1000`.

A viewer gets a keyframe when it joins, when it had not taken the previous frame by the
next tick (it lags: it gets the newest state, never a backlog, and the board never holds
more than one frame for it), and every KEYFRAME_TICKS ticks for everyone (when hosts
quiet for longer than the kept window leave the table).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Any

from board.stream.samples import Sample

# A sample waits at most one tick before it is framed: half a second keeps the time from
# the agent to the page under a second with the rest of the way (about 0.1 s) included.
TICK_SECONDS = 0.5
KEYFRAME_TICKS = 60  # every 30 s


def _event(data: dict[str, Any]) -> bytes:
    body = json.dumps(data, separators=(",", ":"))
    return b"event: frame\ndata: " + body.encode() + b"\n\n"


class FleetViewer:
    """One viewer of a workspace's frames: at most one frame waiting for it, the newest."""

    __slots__ = ("_ready", "lagged", "pending", "wants_key")

    def __init__(self) -> None:
        self.pending: bytes | None = None
        self.wants_key = True  # a new viewer starts from a keyframe
        self.lagged = 0  # frames replaced before this viewer took them
        self._ready = asyncio.Event()

    def put(self, frame: bytes) -> None:
        if self.pending is not None:
            self.lagged += 1
        self.pending = frame
        self.wants_key = False
        self._ready.set()

    async def get(self) -> bytes:
        while self.pending is None:
            self._ready.clear()
            await self._ready.wait()
        frame, self.pending = self.pending, None
        return frame


class FleetView:
    """One workspace's fleet in one process, while someone there watches it."""

    def __init__(self, workspace_id: int, horizon: float) -> None:
        self.workspace_id = workspace_id
        self.horizon = horizon  # seconds a quiet host stays in the table
        self.viewers: set[FleetViewer] = set()
        self.seq = 0
        self.stats: dict[str, int] = {"keyframes": 0, "deltas": 0, "bytes": 0}
        self._newest: dict[str, Sample] = {}
        self._index: dict[str, int] = {}  # hostId -> its place in the host table
        self._gpus: dict[str, tuple[str, ...]] = {}  # hostId -> GPU UUIDs as the table has them
        self._changed: dict[str, None] = {}  # hosts with a new sample since the last tick
        self._ticks_since_key = 0

    # -- in ----------------------------------------------------------------------
    def touch(self, sample: Sample) -> None:
        """A host's sample arrived: it is the host's newest unless an older or a repeat."""
        host = sample.host_id
        known = self._newest.get(host)
        if known is not None:
            if sample.ts < known.ts:
                return
            if sample.ts == known.ts:
                # One sample NOTIFYed in parts (hub.Sample.payloads): its GPUs, joined.
                have = {g[0] for g in known.gpus}
                more = tuple(g for g in sample.gpus if g[0] not in have)
                if not more:
                    return
                sample = replace(known, gpus=known.gpus + more)
        self._newest[host] = sample
        self._changed[host] = None

    # -- out ---------------------------------------------------------------------
    def tick(self, now: float | None = None) -> None:
        """This tick's frames, handed to every viewer (a lagging one gets a keyframe)."""
        now = time.time() if now is None else now
        self.seq += 1
        self._ticks_since_key += 1
        everyone = self._ticks_since_key >= KEYFRAME_TICKS
        if everyone:
            self._repack()
        entries, rows = self._advance()
        key: bytes | None = None
        delta: bytes | None = None
        for viewer in self.viewers:
            if viewer.pending is not None:
                viewer.wants_key = True  # it did not take the last frame: it lags
            if everyone or viewer.wants_key:
                if key is None:
                    key = self._keyframe(now)
                viewer.put(key)
            elif rows or entries:
                if delta is None:
                    delta = self._delta(now, entries, rows)
                viewer.put(delta)

    def _repack(self) -> None:
        """Forget hosts quiet for longer than the horizon and number the rest afresh."""
        self._ticks_since_key = 0
        horizon = time.monotonic() - self.horizon
        self._newest = {h: s for h, s in self._newest.items() if s.received >= horizon}
        self._index = {host: i for i, host in enumerate(self._newest)}
        self._gpus = {h: tuple(g[0] for g in s.gpus) for h, s in self._newest.items()}
        self._changed.clear()

    def _advance(self) -> tuple[list[list[Any]], list[tuple[int, Sample]]]:
        """The table entries (new hosts, changed GPUs) and rows of what changed."""
        entries: list[list[Any]] = []
        rows: list[tuple[int, Sample]] = []
        for host in self._changed:
            sample = self._newest[host]
            index = self._index.get(host)
            if index is None:
                index = self._index[host] = len(self._index)
            uuids = tuple(g[0] for g in sample.gpus)
            if self._gpus.get(host) != uuids:
                self._gpus[host] = uuids
                entries.append([index, host, list(uuids)])
            rows.append((index, sample))
        self._changed.clear()
        return entries, rows

    def _keyframe(self, now: float) -> bytes:
        self.stats["keyframes"] += 1
        entries = [[i, host, list(self._gpus[host])] for host, i in self._index.items()]
        rows = [(i, self._newest[host]) for host, i in self._index.items()]
        return self._frame(True, now, entries, rows)

    def _delta(self, now: float, entries: list[list[Any]], rows: list[tuple[int, Sample]]) -> bytes:
        self.stats["deltas"] += 1
        return self._frame(False, now, entries, rows)

    def _frame(
        self, key: bool, now: float, entries: list[list[Any]], rows: list[tuple[int, Sample]]
    ) -> bytes:
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
