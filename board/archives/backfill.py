"""Archive rows → observations, the way the agent builds its live payload from a tick.

Rows of one `ts` in gpu_sample, with the proc_sample rows of the same `ts`, are one
tick of the host (agent-api.md). The mapping follows the agent's payload builder
(cloud/snapshot.py of gpu-usage-audit 1.8.0): utilization clamped to 0..100, GPU memory
to 0..memoryTotalMb, temperature and power to >= 0 or null, pid > 0 only,
linuxUser = loginuid_user or "unknown", name = process_name or "unknown",
type = process_type or "compute", usageState only when the row has one. Each tick is
then validated by the same SnapshotIn model as a live push, and stored through the
same writer, so rollups are credited by the same code.

All of this is synchronous and CPU-bound: the worker runs it in a thread, a chunk at
a time, so a large day never stalls the event loop.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from board.archives.csvfile import Columns, open_rows, parse_ts
from board.errors import describe_validation_errors
from board.ingest.normalize import Observation
from board.ingest.schemas import SCHEMA_VERSION, SnapshotIn
from board.rollups.crediting import to_us

MAX_ERROR_SAMPLES = 5


@dataclass(frozen=True)
class Device:
    """What a GPU's rows do not carry: its name, total memory and (fallback) index."""

    name: str | None
    memory_total_mb: int | None
    index: int | None = None


class MissingDevice(Exception):
    """A GPU whose name or memory total is not known yet (gpu_device not uploaded)."""

    def __init__(self, uuid: str) -> None:
        super().__init__(uuid)
        self.uuid = uuid


@dataclass
class RawTick:
    ts: datetime
    text: str
    gpus: list[list[str]]
    procs: list[list[str]]


def to_int(text: str) -> int | None:
    """A cell as an integer; empty is null. SQLite may hand back 35.0 for 35."""
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        value = float(text)
        if not value.is_integer():
            raise ValueError(f"{text!r} is not an integer") from None
        return int(value)


def _groups(
    columns: Columns, rows: Iterator[list[str]], counter: list[int]
) -> Iterator[tuple[datetime, str, list[list[str]]]]:
    """Consecutive rows of one instant (the agent writes them ordered by ts)."""
    at = columns.index("ts")
    assert at is not None
    current: tuple[datetime, str, list[list[str]]] | None = None
    for row in rows:
        counter[0] += 1
        text = row[at]
        if current is not None and text == current[1]:
            current[2].append(row)
            continue
        ts = parse_ts(text)
        if current is not None and ts == current[0]:
            current[2].append(row)
            continue
        if current is not None:
            yield current
        current = (ts, text, [row])
    if current is not None:
        yield current


class TickReader:
    """Merge-joins the two day tables, streaming, into ticks."""

    def __init__(self, gpu_data: bytes, proc_data: bytes, max_uncompressed: int) -> None:
        self.gpu_columns, gpu_rows = open_rows(gpu_data, max_uncompressed)
        self.proc_columns, proc_rows = open_rows(proc_data, max_uncompressed)
        self._gpu_count = [0]
        self._proc_count = [0]
        self._gpu = _groups(self.gpu_columns, gpu_rows, self._gpu_count)
        self._proc = _groups(self.proc_columns, proc_rows, self._proc_count)
        self.orphan_process_rows = 0

    @property
    def rows_read(self) -> int:
        return self._gpu_count[0] + self._proc_count[0]

    def __iter__(self) -> Iterator[RawTick]:
        pending = next(self._proc, None)
        for ts, text, gpu_rows in self._gpu:
            while pending is not None and pending[0] < ts:
                self.orphan_process_rows += len(pending[2])
                pending = next(self._proc, None)
            procs: list[list[str]] = []
            if pending is not None and pending[0] == ts:
                procs = pending[2]
                pending = next(self._proc, None)
            yield RawTick(ts, text, gpu_rows, procs)
        while pending is not None:
            self.orphan_process_rows += len(pending[2])
            pending = next(self._proc, None)


class Converter:
    """One tick → the SnapshotIn the agent would have pushed for it."""

    def __init__(
        self,
        gpu_columns: Columns,
        proc_columns: Columns,
        devices: dict[str, Device],
        devices_complete: bool,
        host: dict[str, str],
    ) -> None:
        self._devices = devices
        # False while gpu_device has not been uploaded: an unknown GPU means "wait".
        self._devices_complete = devices_complete
        self._host = host
        g = gpu_columns.index
        self._g = {
            n: g(n)
            for n in (
                "gpu_uuid",
                "util_pct",
                "usage_state",
                "gpu_index",
                "memory_used_mb",
                "temperature_c",
                "power_w",
            )
        }
        p = proc_columns.index
        self._p = {
            n: p(n)
            for n in (
                "gpu_uuid",
                "pid",
                "mem_used_mb",
                "loginuid_user",
                "process_name",
                "process_type",
            )
        }

    @staticmethod
    def _cell(row: list[str], at: int | None) -> str:
        return row[at] if at is not None else ""

    def _process(self, row: list[str]) -> dict[str, Any] | None:
        c, p = self._cell, self._p
        pid = to_int(c(row, p["pid"]))
        if pid is None or pid <= 0:
            return None  # the agent never sends pid <= 0
        mem = to_int(c(row, p["mem_used_mb"]))
        return {
            "pid": pid,
            "linuxUser": c(row, p["loginuid_user"]) or "unknown",
            "name": c(row, p["process_name"]) or "unknown",
            "type": c(row, p["process_type"]) or "compute",
            "memoryUsedMb": None if mem is None else max(0, mem),
        }

    def snapshot(self, tick: RawTick) -> SnapshotIn:
        c, g = self._cell, self._g
        procs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in tick.procs:
            built = self._process(row)
            if built is not None:
                procs[c(row, self._p["gpu_uuid"])].append(built)
        gpus: list[dict[str, Any]] = []
        for position, row in enumerate(tick.gpus):
            uuid = c(row, g["gpu_uuid"])
            device = self._devices.get(uuid)
            if device is None or not device.name or not device.memory_total_mb:
                if not self._devices_complete:
                    raise MissingDevice(uuid)
                raise ValueError(f"GPU {uuid!r} has no name or memory total in gpu_device")
            total = device.memory_total_mb
            util = to_int(c(row, g["util_pct"]))
            if util is None:
                raise ValueError(f"GPU {uuid!r} has an empty util_pct")
            index = to_int(c(row, g["gpu_index"]))
            if index is None:
                index = device.index if device.index is not None else position
            temperature = to_int(c(row, g["temperature_c"]))
            power = to_int(c(row, g["power_w"]))
            gpu: dict[str, Any] = {
                "index": index,
                "uuid": uuid,
                "name": device.name,
                "memoryTotalMb": total,
                "utilPct": max(0, min(100, util)),
                "memoryUsedMb": max(0, min(total, to_int(c(row, g["memory_used_mb"])) or 0)),
                "temperatureC": None if temperature is None else max(0, temperature),
                "powerW": None if power is None else max(0, power),
                "processes": procs.pop(uuid, []),
            }
            state = c(row, g["usage_state"])
            if state:
                gpu["usageState"] = state
            gpus.append(gpu)
        if procs:
            raise ValueError(f"process rows for GPU(s) {sorted(procs)} without a GPU row")
        payload = {
            "schemaVersion": SCHEMA_VERSION,
            # The archive does not record it; accounting never reads it.
            "collectionStatus": "ok",
            "errors": [],
            "observedAt": tick.text,
            "host": self._host,
            "gpus": gpus,
        }
        try:
            return SnapshotIn.model_validate(payload)
        except ValidationError as exc:
            raise ValueError(describe_validation_errors(list(exc.errors()))) from None


@dataclass
class Progress:
    rows_read: int = 0
    ticks: int = 0
    added: int = 0
    skipped: int = 0
    skipped_reasons: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped += n
        self.skipped_reasons[reason] += n

    def error(self, message: str, n: int = 1) -> None:
        self.errors += n
        if len(self.error_samples) < MAX_ERROR_SAMPLES:
            self.error_samples.append(message)


class Planner:
    """For every tick: skip it (and say why), or the Observation to store.

    `stored_us` are the host's stored observation times around the day. A tick equal to
    one is already stored; a tick within the tolerance of one is the same tick seen
    twice (an agent whose local row and push carry slightly different times), so it is
    skipped too. The tolerance stays under half the distance to the archive's
    neighbouring ticks, so a stored observation can only ever match one archive tick.
    """

    def __init__(
        self,
        reader: TickReader,
        converter: Converter,
        *,
        workspace_id: int,
        host_id: int,
        stored_us: list[int],
        tolerance_us: int,
        oldest: datetime,
        received_at: datetime,
        progress: Progress,
    ) -> None:
        self._reader = reader
        self._converter = converter
        self._workspace_id = workspace_id
        self._host_id = host_id
        self._stored = stored_us
        self._tolerance = tolerance_us
        self._oldest = oldest
        self._received_at = received_at
        self.progress = progress
        self._ticks = self._with_neighbours()
        self._finished = False

    def _with_neighbours(self) -> Iterator[tuple[RawTick, int]]:
        """Each tick with its allowed tolerance (from the gaps to its neighbours)."""
        prev_us: int | None = None
        held: RawTick | None = None
        for tick in self._reader:
            if held is not None:
                yield held, self._tolerance_for(prev_us, to_us(held.ts), to_us(tick.ts))
                prev_us = to_us(held.ts)
            held = tick
        if held is not None:
            yield held, self._tolerance_for(prev_us, to_us(held.ts), None)

    def _tolerance_for(self, prev_us: int | None, us: int, next_us: int | None) -> int:
        gaps = [us - prev_us] if prev_us is not None else []
        if next_us is not None:
            gaps.append(next_us - us)
        return min([self._tolerance, *(gap * 2 // 5 for gap in gaps)])

    def _near_stored(self, us: int, tolerance: int) -> str | None:
        i = bisect.bisect_left(self._stored, us - tolerance)
        if i == len(self._stored) or self._stored[i] > us + tolerance:
            return None
        j = bisect.bisect_left(self._stored, us)
        exact = j < len(self._stored) and self._stored[j] == us
        return "already_stored" if exact else "near_stored"

    def next_chunk(self, size: int) -> list[Observation]:
        """Up to `size` observations to store; an empty list when the day is done."""
        chunk: list[Observation] = []
        p = self.progress
        for tick, tolerance in self._ticks:
            p.ticks += 1
            p.rows_read = self._reader.rows_read
            if tick.ts < self._oldest:
                p.skip("older_than_raw_retention")
                continue
            matched = self._near_stored(to_us(tick.ts), tolerance)
            if matched is not None:
                p.skip(matched)
                continue
            try:
                snapshot = self._converter.snapshot(tick)
            except (ValueError, TypeError) as exc:
                p.error(f"{tick.text}: {exc}")
                continue
            chunk.append(
                Observation(self._workspace_id, self._host_id, tick.ts, self._received_at, snapshot)
            )
            if len(chunk) >= size:
                return chunk
        p.rows_read = self._reader.rows_read
        if not self._finished:
            self._finished = True
            orphans = self._reader.orphan_process_rows
            if orphans:
                p.error(f"{orphans} proc_sample row(s) have no gpu_sample row at their ts", orphans)
        return chunk
