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
a time, so a large day never stalls the event loop. Memory is bounded, not proportional
to the file: rows are read as a stream, only the columns used are kept, one instant holds
at most archive_max_tick_rows rows and archive_max_tick_chars characters of each table
(a larger one is dropped as it is read and reported as an error), and a chunk holds at
most CHUNK_ROWS rows' worth of observations.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import Any, BinaryIO

from pydantic import ValidationError

from board.archives.csvfile import ArchiveReader, Columns, Limits, parse_ts
from board.errors import describe_validation_errors
from board.ingest.normalize import Observation
from board.ingest.schemas import SCHEMA_VERSION, SnapshotIn
from board.rollups.crediting import to_us

MAX_ERROR_SAMPLES = 5
MAX_ERROR_CHARS = 300  # an error sample may quote a cell; cells can be long
# Rows (GPU + process) whose observations one chunk may hold before it is written: a
# chunk's memory follows its rows, not its tick count (a tick can hold thousands).
CHUNK_ROWS = 4096
OVER_GPU_LIMIT = "over_max_gpus_per_host"

# The columns the conversion reads, in this order (a missing one reads as empty).
GPU_FIELDS = (
    "gpu_uuid",
    "util_pct",
    "usage_state",
    "gpu_index",
    "memory_used_mb",
    "temperature_c",
    "power_w",
)
PROC_FIELDS = ("gpu_uuid", "pid", "mem_used_mb", "loginuid_user", "process_name", "process_type")
G = {name: i for i, name in enumerate(GPU_FIELDS)}
P = {name: i for i, name in enumerate(PROC_FIELDS)}


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


Cells = tuple[str, ...]


@dataclass
class Group:
    """The rows of one instant in one table (only the columns used)."""

    ts: datetime
    text: str
    rows: list[Cells]
    problem: str | None = None  # set (and rows dropped) when the instant is too large


@dataclass
class RawTick:
    ts: datetime
    text: str
    gpus: list[Cells]
    procs: list[Cells]
    problem: str | None = None

    @property
    def size(self) -> int:
        return len(self.gpus) + len(self.procs)


def to_int(text: str) -> int | None:
    """A cell as an integer; empty is null. SQLite may hand back 35.0 for 35."""
    if text == "":
        return None
    if len(text) > 32:  # int() of a very long digit string is slow, then raises
        raise ValueError(f"{text[:32]!r}… is not an integer")
    try:
        return int(text)
    except ValueError:
        value = float(text)
        if not value.is_integer():
            raise ValueError(f"{text!r} is not an integer") from None
        return int(value)


def _projector(columns: Columns, fields: tuple[str, ...]) -> Callable[[list[str]], Cells]:
    """Row → the cells of `fields`; a column the file lacks reads as empty."""
    at = [columns.index(name) for name in fields]
    pick = itemgetter(*(-1 if i is None else i for i in at))

    def project(row: list[str]) -> Cells:
        row.append("")  # what index -1 (a missing column) reads
        return pick(row)  # type: ignore[no-any-return]

    return project


def _groups(reader: ArchiveReader, fields: tuple[str, ...], table: str) -> Iterator[Group]:
    """Consecutive rows of one instant (the agent writes them ordered by ts), bounded."""
    at = reader.columns.index("ts")
    assert at is not None
    project = _projector(reader.columns, fields)
    max_rows, max_chars = reader.limits.tick_rows, reader.limits.tick_chars
    current: Group | None = None
    chars = 0
    for row in reader:
        text = row[at]
        if current is None or text != current.text:
            ts = parse_ts(text)
            if current is None or ts != current.ts:
                if current is not None:
                    yield current
                current = Group(ts, text, [])
                chars = 0
        chars += reader.row_chars
        if current.problem is not None:
            continue
        if len(current.rows) >= max_rows or chars > max_chars:
            current.problem = (
                f"more than {max_rows} {table} rows or {max_chars} characters at one instant"
            )
            current.rows = []  # nothing of an instant this large is kept
            continue
        current.rows.append(project(row))
    if current is not None:
        yield current


class TickReader:
    """Merge-joins the two day tables, streaming, into ticks."""

    def __init__(self, gpu_source: BinaryIO, proc_source: BinaryIO, limits: Limits) -> None:
        self._gpu_reader = ArchiveReader(gpu_source, limits)
        self._proc_reader = ArchiveReader(proc_source, limits)
        self._gpu = _groups(self._gpu_reader, GPU_FIELDS, "gpu_sample")
        self._proc = _groups(self._proc_reader, PROC_FIELDS, "proc_sample")
        self.orphan_process_rows = 0

    @property
    def rows_read(self) -> int:
        return self._gpu_reader.rows + self._proc_reader.rows

    def __iter__(self) -> Iterator[RawTick]:
        pending = next(self._proc, None)
        for gpus in self._gpu:
            while pending is not None and pending.ts < gpus.ts:
                self.orphan_process_rows += len(pending.rows)
                pending = next(self._proc, None)
            procs: list[Cells] = []
            problem = gpus.problem
            if pending is not None and pending.ts == gpus.ts:
                procs = pending.rows
                problem = problem or pending.problem
                pending = next(self._proc, None)
            yield RawTick(gpus.ts, gpus.text, gpus.rows, procs, problem)
        while pending is not None:
            self.orphan_process_rows += len(pending.rows)
            pending = next(self._proc, None)


class Converter:
    """One tick → the SnapshotIn the agent would have pushed for it."""

    def __init__(
        self,
        devices: dict[str, Device],
        devices_complete: bool,
        host: dict[str, str],
    ) -> None:
        self._devices = devices
        # False while gpu_device has not been uploaded: an unknown GPU means "wait".
        self._devices_complete = devices_complete
        self._host = host

    @staticmethod
    def _process(row: Cells) -> dict[str, Any] | None:
        pid = to_int(row[P["pid"]])
        if pid is None or pid <= 0:
            return None  # the agent never sends pid <= 0
        mem = to_int(row[P["mem_used_mb"]])
        return {
            "pid": pid,
            "linuxUser": row[P["loginuid_user"]] or "unknown",
            "name": row[P["process_name"]] or "unknown",
            "type": row[P["process_type"]] or "compute",
            "memoryUsedMb": None if mem is None else max(0, mem),
        }

    def snapshot(self, tick: RawTick) -> SnapshotIn:
        procs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in tick.procs:
            built = self._process(row)
            if built is not None:
                procs[row[P["gpu_uuid"]]].append(built)
        gpus: list[dict[str, Any]] = []
        for position, row in enumerate(tick.gpus):
            uuid = row[G["gpu_uuid"]]
            device = self._devices.get(uuid)
            if device is None or not device.name or not device.memory_total_mb:
                if not self._devices_complete:
                    raise MissingDevice(uuid)
                raise ValueError(f"GPU {uuid!r} has no name or memory total in gpu_device")
            total = device.memory_total_mb
            util = to_int(row[G["util_pct"]])
            if util is None:
                raise ValueError(f"GPU {uuid!r} has an empty util_pct")
            index = to_int(row[G["gpu_index"]])
            if index is None:
                index = device.index if device.index is not None else position
            temperature = to_int(row[G["temperature_c"]])
            power = to_int(row[G["power_w"]])
            gpu: dict[str, Any] = {
                "index": index,
                "uuid": uuid,
                "name": device.name,
                "memoryTotalMb": total,
                "utilPct": max(0, min(100, util)),
                "memoryUsedMb": max(0, min(total, to_int(row[G["memory_used_mb"]]) or 0)),
                "temperatureC": None if temperature is None else max(0, temperature),
                "powerW": None if power is None else max(0, power),
                "processes": procs.pop(uuid, []),
            }
            state = row[G["usage_state"]]
            if state:
                gpu["usageState"] = state
            gpus.append(gpu)
        if procs:
            raise ValueError(f"process rows for GPU(s) {sorted(procs)[:8]} without a GPU row")
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
            if len(message) > MAX_ERROR_CHARS:
                message = message[: MAX_ERROR_CHARS - 1] + "…"
            self.error_samples.append(message)


class GpuBudget:
    """The GPU identities a host may have (workspaces.max_gpus_per_host).

    A tick naming a GPU the host does not have yet is stored only while the host stays
    within its limit; the GPUs it brings count from then on.
    """

    def __init__(self, known: set[str], limit: int) -> None:
        self._known = set(known)
        self.limit = limit

    def admit(self, uuids: list[str]) -> bool:
        new = {u for u in uuids if u not in self._known}
        if new and len(self._known) + len(new) > self.limit:
            return False
        self._known |= new
        return True


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
        gpu_budget: GpuBudget,
    ) -> None:
        self._reader = reader
        self._gpu_budget = gpu_budget
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

    def next_chunk(self, size: int, max_rows: int = CHUNK_ROWS) -> list[Observation]:
        """Up to `size` observations (and about `max_rows` rows) to store; [] when done."""
        chunk: list[Observation] = []
        rows = 0
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
            if tick.problem is not None:
                p.error(f"{tick.text}: {tick.problem}")
                continue
            try:
                snapshot = self._converter.snapshot(tick)
            except (ValueError, TypeError) as exc:
                p.error(f"{tick.text}: {exc}")
                continue
            if not self._gpu_budget.admit([g.uuid for g in snapshot.gpus]):
                p.skip(OVER_GPU_LIMIT)
                continue
            chunk.append(
                Observation(self._workspace_id, self._host_id, tick.ts, self._received_at, snapshot)
            )
            rows += tick.size
            if len(chunk) >= size or rows >= max_rows:
                return chunk
        p.rows_read = self._reader.rows_read
        if not self._finished:
            self._finished = True
            orphans = self._reader.orphan_process_rows
            if orphans:
                p.error(f"{orphans} proc_sample row(s) have no gpu_sample row at their ts", orphans)
        return chunk
