"""The counting rules of accounting.md, in one place.

How an observed interval is credited is written once, here: from an opener to the next
observation of its host, a gap (longer than the maxSampleGap in force at the opener,
board.rollups.gaps) counting for nobody, cut at UTC hour boundaries, and when a late
observation splits a stored interval, the whole taken back and each part credited under
its own opener's limit (`credit_insertion`). What the pieces are credited *to* is a
`CreditTarget`: the hourly rollups (`RollupDelta`, below), a reservation's figures
(board.reservations.crediting), and any other sums over a host's observed time.

Both the ingest path (crediting each new interval, re-splitting one an out-of-order
observation lands in) and `rollups rebuild` (replaying raw history) go through it, so
the two cannot disagree. All durations are integer microseconds: crediting an interval
and un-crediting it are exact inverses, which makes totals independent of arrival order.

A tick carries the counted state and the compute holders only; who is billed (the
holders, or `unknown` for a held card naming no compute process) is decided here, when
an interval is credited, so every way of obtaining a tick bills the same.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from board.rollups.gaps import GapSchedule

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HOUR_US = 3_600_000_000
ACTIVE_THRESHOLD_PCT = 5

# The sums kept per GPU and hour, in the order of a RollupDelta.gpu row.
GPU_COLUMNS = (
    "covered_us",
    "active_us",
    "idle_held_us",
    "idle_us",
    "util_pct_us",
    "memory_used_mb_us",
    "memory_total_mb_us",
    "sample_count",
    # Energy (accounting.md): time whose opener reported a power draw, and watts x µs
    # (µJ) by the GPU's state; exact integers like the rest, so un-crediting is exact.
    "energy_covered_us",
    "active_energy_uws",
    "idle_held_energy_uws",
    "idle_energy_uws",
)
# ... and per GPU, Linux user and hour, in the order of a RollupDelta.user row.
USER_COLUMNS = (
    "held_us",
    "active_us",
    "idle_held_us",
    # The user's share of the energy: held time with a power reading, and µJ by state.
    "energy_held_us",
    "active_energy_uws",
    "idle_held_energy_uws",
)
# Slots of those rows (list indexes: the crediting loop is the ingest path's hottest).
(
    _COVERED,
    _ACTIVE,
    _IDLE_HELD,
    _IDLE,
    _UTIL,
    _MEM_USED,
    _MEM_TOTAL,
    _SAMPLES,
    _ENERGY_COVERED,
    _ACTIVE_ENERGY,
    _IDLE_HELD_ENERGY,
    _IDLE_ENERGY,
) = range(len(GPU_COLUMNS))
(
    _HELD,
    _USER_ACTIVE,
    _USER_IDLE_HELD,
    _USER_ENERGY_HELD,
    _USER_ACTIVE_ENERGY,
    _USER_IDLE_HELD_ENERGY,
) = range(len(USER_COLUMNS))
_STATE_SLOT = {"active": _ACTIVE, "idle_held": _IDLE_HELD, "idle": _IDLE}
_ENERGY_SLOT = {"active": _ACTIVE_ENERGY, "idle_held": _IDLE_HELD_ENERGY, "idle": _IDLE_ENERGY}
_GPU_ROW = len(GPU_COLUMNS)
_USER_ROW = len(USER_COLUMNS)
# Billed for a card that is held (active or idle-held) while no compute process is named.
UNKNOWN_USER = "unknown"
_NOBODY_NAMED = (UNKNOWN_USER,)


def to_us(ts: datetime) -> int:
    return (ts - EPOCH) // timedelta(microseconds=1)


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def derive_state(
    util_pct: int, has_compute_process: bool, process_list_unread: bool = False
) -> str:
    """The single-tick rule for agents that send no usageState.

    `process_list_unread`: a GPU listing no process at all in a `partial` observation,
    whose process list may simply be unreadable; utilization alone decides then, so a
    busy card is never shown as free.
    """
    busy = util_pct > ACTIVE_THRESHOLD_PCT
    if process_list_unread:
        return "active" if busy else "idle"
    if not has_compute_process:
        return "idle"
    return "active" if busy else "idle_held"


def compute_holders(processes: Iterable[tuple[str, str | None]]) -> tuple[str, ...]:
    """Distinct Linux users of compute processes; graphics processes own nothing."""
    return tuple(sorted({user for user, ptype in processes if (ptype or "compute") == "compute"}))


def named_jobs(
    processes: Iterable[tuple[str, str | None, str | None]],
) -> tuple[tuple[str, str], ...]:
    """The distinct (Linux user, job id) of a GPU's compute processes, sorted, "" for one
    that names no job, from (user, type, jobId); empty when none names a job (always, for
    the released agent), so only the holders count then (board.rollups.allocated)."""
    pairs = {
        (user, job or "") for user, ptype, job in processes if (ptype or "compute") == "compute"
    }
    if not any(job for _, job in pairs):
        return ()
    return tuple(sorted(pairs))


def billed_users(state: str, holders: tuple[str, ...]) -> tuple[str, ...]:
    """Who a GPU's time is billed to: its compute holders, or `unknown` for a card that
    is held (active or idle-held) with no compute process named.

    Applied where an interval is credited, not where a tick is built, so a tick read
    back from raw samples (holders from compute rows, the counted state) or from the
    host's `latest_tick` is billed exactly like the one ingest built.
    """
    if holders or state == "idle":
        return holders
    return _NOBODY_NAMED


# Named tuples, not frozen dataclasses: ingest builds about 16 GpuTicks per observation,
# and a frozen dataclass's __init__ (object.__setattr__ per field) cost 1.9 µs each
# against 0.3 µs (docs/benchmarks.md, "Ingest: room for in-place updates").
class GpuTick(NamedTuple):
    gpu_id: int
    state: str
    util_pct: int
    memory_used_mb: int
    memory_total_mb: int
    holders: tuple[str, ...]
    # Watts, or None when the agent could not read it: the interval adds no energy then.
    power_w: int | None = None
    # (user, job) of its compute processes when any names its scheduler job (named_jobs).
    job_pairs: tuple[tuple[str, str], ...] = ()


class Tick(NamedTuple):
    """What one observation says about a host's GPUs; holds until the next observation."""

    host_id: int
    observed_us: int
    gpus: tuple[GpuTick, ...]


class CreditTarget(Protocol):
    """What observed time is credited to: sums kept per hour, keyed as the target likes."""

    def credit_piece(
        self, opener: Tick, hour_us: int, start_us: int, end_us: int, sign: int
    ) -> None:
        """Add `sign` (1, or -1 to take back) times the piece [start_us, end_us) of the
        interval `opener` opened; the piece lies inside the UTC hour from `hour_us`."""
        ...


def credit_interval(
    target: CreditTarget, opener: Tick, end_us: int, max_gap_us: int, sign: int = 1
) -> None:
    """Credit (sign=1) or un-credit (sign=-1) the interval `opener` → `end_us`, hour by hour."""
    start = opener.observed_us
    length = end_us - start
    if length <= 0 or length > max_gap_us or not opener.gpus:
        return  # a gap is billed to nobody and is not covered time
    cursor = start
    while cursor < end_us:
        hour = cursor - cursor % HOUR_US
        stop = min(end_us, hour + HOUR_US)
        target.credit_piece(opener, hour, cursor, stop, sign)
        cursor = stop


def credit_insertion(
    target: CreditTarget,
    before: Tick | None,
    new: Sequence[Tick],
    after_us: int | None,
    gaps: GapSchedule,
) -> None:
    """New observations landing between two stored ones (either may be absent).

    The interval before→after is replaced by before→new[0]→…→new[-1]→after. Each
    interval is judged by the limit in force at its opener (board.rollups.gaps), so
    the one taken back is judged as it was when it was credited. With no `before` and
    no `after`, `new` is a stretch of history in time order (a rebuild, a replay).
    """
    if not new:
        return
    if before is not None:
        limit = gaps.at(before.observed_us)
        if after_us is not None:
            credit_interval(target, before, after_us, limit, sign=-1)
        credit_interval(target, before, new[0].observed_us, limit)
    for opener, closer in zip(new, new[1:], strict=False):
        credit_interval(target, opener, closer.observed_us, gaps.at(opener.observed_us))
    if after_us is not None:
        credit_interval(target, new[-1], after_us, gaps.at(new[-1].observed_us))


GpuHourKey = tuple[int, int, int]  # (host_id, gpu_id, hour start in µs)
UserHourKey = tuple[int, int, str, int]  # (host_id, gpu_id, linux_user, hour start in µs)


@dataclass
class RollupDelta:
    """Changes to the hourly rollups, summed before they are written in one statement
    (the host-hour rows follow the GPU-hour rows in the database).

    Rows are lists of GPU_COLUMNS and USER_COLUMNS sums; keys are plain tuples, built for
    every GPU of every interval.
    """

    gpu: dict[GpuHourKey, list[int]] = field(default_factory=dict)
    user: dict[UserHourKey, list[int]] = field(default_factory=dict)

    def credit_piece(
        self, opener: Tick, hour_us: int, start_us: int, end_us: int, sign: int
    ) -> None:
        """Each GPU's piece to its state, and split between the users it is billed to."""
        host = opener.host_id
        piece = end_us - start_us
        for g in opener.gpus:
            row = self.gpu.get((host, g.gpu_id, hour_us))
            if row is None:
                row = self.gpu[(host, g.gpu_id, hour_us)] = [0] * _GPU_ROW
            row[_COVERED] += sign * piece
            row[_STATE_SLOT[g.state]] += sign * piece
            row[_UTIL] += sign * g.util_pct * piece
            row[_MEM_USED] += sign * g.memory_used_mb * piece
            row[_MEM_TOTAL] += sign * g.memory_total_mb * piece
            power = g.power_w
            if power is not None:
                row[_ENERGY_COVERED] += sign * piece
                row[_ENERGY_SLOT[g.state]] += sign * power * piece
            # billed_users(g.state, g.holders), inlined: the ingest hot path.
            users = g.holders or (_NOBODY_NAMED if g.state != "idle" else ())
            if users:
                # Each user's share of the time, and of the energy exactly as of the time.
                share = sign * (piece // len(users))
                for user in users:
                    urow = self.user.get((host, g.gpu_id, user, hour_us))
                    if urow is None:
                        urow = self.user[(host, g.gpu_id, user, hour_us)] = [0] * _USER_ROW
                    urow[_HELD] += share
                    if g.state == "active":
                        urow[_USER_ACTIVE] += share
                    elif g.state == "idle_held":
                        urow[_USER_IDLE_HELD] += share
                    if power is not None:
                        urow[_USER_ENERGY_HELD] += share
                        if g.state == "active":
                            urow[_USER_ACTIVE_ENERGY] += power * share
                        elif g.state == "idle_held":
                            urow[_USER_IDLE_HELD_ENERGY] += power * share

    def credit(self, opener: Tick, end_us: int, max_gap_us: int, sign: int = 1) -> None:
        """Credit (sign=1) or un-credit (sign=-1) the interval opened by `opener`."""
        credit_interval(self, opener, end_us, max_gap_us, sign)

    def count_samples(self, tick: Tick) -> None:
        hour = tick.observed_us - tick.observed_us % HOUR_US
        for g in tick.gpus:
            row = self.gpu.get((tick.host_id, g.gpu_id, hour))
            if row is None:
                row = self.gpu[(tick.host_id, g.gpu_id, hour)] = [0] * _GPU_ROW
            row[_SAMPLES] += 1

    def credit_insertion(
        self,
        before: Tick | None,
        new: Sequence[Tick],
        after_us: int | None,
        gaps: GapSchedule,
    ) -> None:
        """New observations between two stored ones (`credit_insertion`), each of them
        counted as a sample of its hour."""
        credit_insertion(self, before, new, after_us, gaps)
        for tick in new:
            self.count_samples(tick)

    def credit_series(self, ticks: Sequence[Tick], gaps: GapSchedule) -> None:
        """A host's whole history in time order (the recompute path)."""
        self.credit_insertion(None, ticks, None, gaps)


def gpu_ticks(
    gpu_ids: list[int],
    states: list[str],
    utils: list[int],
    used: list[int],
    totals: list[int],
    process_gpus: list[int],
    process_users: list[str],
    process_types: list[str],
    powers: Sequence[int | None] | None = None,
    process_jobs: Sequence[str | None] | None = None,
) -> tuple[GpuTick, ...]:
    """One stored observation's GPUs as ticks, from its raw arrays: each with its compute
    holders, in GPU id order (an error heartbeat has none); `powers` the GPUs' watts
    (None: the reader needs no energy); `process_jobs` the processes' job ids (None:
    none named one, or the reader needs no jobs)."""
    users: dict[int, list[tuple[str, str, str | None]]] = defaultdict(list)
    jobs = process_jobs if process_jobs is not None else [None] * len(process_gpus)
    for gpu_id, user, ptype, job in zip(
        process_gpus, process_users, process_types, jobs, strict=True
    ):
        users[gpu_id].append((user, ptype, job))
    watts = powers if powers is not None else [None] * len(gpu_ids)
    ticks = []
    for gpu_id, state, util, mem, total, power in zip(
        gpu_ids, states, utils, used, totals, watts, strict=True
    ):
        processes = users.get(gpu_id, ())
        holders = compute_holders((user, ptype) for user, ptype, _ in processes)
        pairs = named_jobs(processes) if process_jobs is not None else ()
        ticks.append(GpuTick(gpu_id, state, util, mem, total, holders, power, pairs))
    ticks.sort(key=lambda g: g.gpu_id)
    return tuple(ticks)
