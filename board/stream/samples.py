"""A host's live sample as the board passes it around (agent socket, NOTIFY, browsers),
and a host's recent samples as a process keeps them for pages that open.

Kept samples are stored compactly (HostHistory): a thousand hosts' five minutes are
300,000 samples a process, about 1.7 KB each as Python objects (a GPU UUID string per
GPU per sample), under 0.2 KB as rows that share their host's UUIDs and pack the rest
in one bytes object.
"""

from __future__ import annotations

import json
import math
import struct
import time
from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# PostgreSQL refuses NOTIFY payloads of 8000 bytes or more; stay clear of it.
MAX_PAYLOAD = 7900
MAX_MEMORY_MB = 2**31 - 1  # as the agent's message allows (messages.UtilGpu)


@dataclass(frozen=True, slots=True)
class Sample:
    """One utilization message of one host, as the board passes it around."""

    workspace_id: int
    host_id: str  # the public hostId
    ts: float  # the agent's clock, epoch seconds
    gpus: tuple[tuple[str, int, int], ...]  # (uuid, utilPct, memoryUsedMb)
    dropped: int = 0  # bad messages dropped on this host's connection so far
    received: float = field(default_factory=time.monotonic, compare=False)

    def event(self) -> dict[str, Any]:
        """The JSON a browser gets."""
        return {
            "hostId": self.host_id,
            "ts": self.ts,
            "at": datetime.fromtimestamp(self.ts, UTC).isoformat(),
            "gpus": [{"uuid": u, "utilPct": p, "memoryUsedMb": m} for u, p, m in self.gpus],
            "dropped": self.dropped,
        }

    def payloads(self) -> list[str]:
        """NOTIFY payloads: one, or the GPUs split over several when they would not fit."""
        chunks = [list(self.gpus)]
        while True:
            out = [
                json.dumps(
                    {
                        "w": self.workspace_id,
                        "h": self.host_id,
                        "t": self.ts,
                        "g": chunk,
                        "d": self.dropped,
                    },
                    separators=(",", ":"),
                )
                for chunk in chunks
            ]
            if all(len(p.encode()) <= MAX_PAYLOAD for p in out) or max(map(len, chunks)) <= 1:
                return [p for p in out if len(p.encode()) <= MAX_PAYLOAD]
            chunks = [half for c in chunks for half in (c[: len(c) // 2], c[len(c) // 2 :]) if half]

    @classmethod
    def from_payload(cls, payload: str) -> Sample | None:
        try:
            data = json.loads(payload)
            gpus = tuple((str(u), int(p), int(m)) for u, p, m in data["g"])
            ts = float(data["t"])
            if not math.isfinite(ts):
                return None
            # As the agent's message allows (messages.py): the board NOTIFYs only those,
            # but anyone with the database's credentials may NOTIFY the channel.
            if any(not (0 <= p <= 100 and 0 <= m <= MAX_MEMORY_MB) for _, p, m in gpus):
                return None
            return cls(int(data["w"]), str(data["h"]), ts, gpus, int(data.get("d", 0)))
        except (ValueError, TypeError, KeyError):
            return None


# One kept sample: the GPUs' UUIDs (the host's tuple, shared while they do not change)
# and one bytes object: ts, received (monotonic), dropped, then a byte of utilization per
# GPU and a 4-byte memory figure per GPU.
_HEAD = struct.Struct("=ddi")
_Row = tuple[tuple[str, ...], bytes]


class HostHistory:
    """One host's samples of the last few minutes, oldest first, stored compactly; its
    newest also as the Sample it arrived as (the fleet's frames and /latest read it)."""

    __slots__ = ("_rows", "_uuids", "host_id", "newest")

    def __init__(self, host_id: str, most: int) -> None:
        self.host_id = host_id
        self.newest: Sample | None = None
        self._rows: deque[_Row] = deque(maxlen=most)  # bounded by count too
        self._uuids: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self._rows)

    def append(self, sample: Sample) -> None:
        gpus = sample.gpus
        uuids = tuple(g[0] for g in gpus)
        if uuids == self._uuids:
            uuids = self._uuids
        else:
            self._uuids = uuids
        packed = (
            _HEAD.pack(sample.ts, sample.received, sample.dropped)
            + bytes(g[1] for g in gpus)
            + array("i", [g[2] for g in gpus]).tobytes()
        )
        self._rows.append((uuids, packed))
        self.newest = sample

    def expire(self, horizon: float) -> None:
        """Forget samples that arrived before `horizon` (time.monotonic())."""
        rows = self._rows
        while rows and _HEAD.unpack_from(rows[0][1])[1] < horizon:
            rows.popleft()
        if not rows:
            self.newest = None

    def samples(self, workspace_id: int) -> Iterator[Sample]:
        for uuids, packed in self._rows:
            ts, received, dropped = _HEAD.unpack_from(packed)
            start = _HEAD.size + len(uuids)
            memory = array("i")
            memory.frombytes(packed[start:])
            gpus = tuple(zip(uuids, packed[_HEAD.size : start], memory, strict=True))
            yield Sample(workspace_id, self.host_id, ts, gpus, dropped, received)
