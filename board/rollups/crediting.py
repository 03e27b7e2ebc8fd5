"""The counting rules of accounting.md, in one place.

Both the ingest path (crediting each new interval, re-splitting one an out-of-order
observation lands in) and `rollups rebuild` (replaying raw history) call `credit`, so
the two cannot disagree. All durations are integer microseconds: crediting an interval
and un-crediting it are exact inverses, which makes totals independent of arrival order.

A tick carries the counted state and the compute holders only; who is billed (the
holders, or `unknown` for a held card naming no compute process) is decided here, when
an interval is credited, so every way of obtaining a tick bills the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HOUR_US = 3_600_000_000
ACTIVE_THRESHOLD_PCT = 5

# gpu row: covered, active, idle_held, idle, util_pct_us, mem_used_mb_us, mem_total_mb_us, samples
GPU_COLUMNS = (
    "covered_us",
    "active_us",
    "idle_held_us",
    "idle_us",
    "util_pct_us",
    "memory_used_mb_us",
    "memory_total_mb_us",
    "sample_count",
)
USER_COLUMNS = ("held_us", "active_us", "idle_held_us")
_STATE_SLOT = {"active": 1, "idle_held": 2, "idle": 3}
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


@dataclass(frozen=True, slots=True)
class GpuTick:
    gpu_id: int
    state: str
    util_pct: int
    memory_used_mb: int
    memory_total_mb: int
    holders: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Tick:
    """What one observation says about a host's GPUs; holds until the next observation."""

    host_id: int
    observed_us: int
    gpus: tuple[GpuTick, ...]


@dataclass
class RollupDelta:
    """Changes to the hourly rollups, summed before they are written in one statement."""

    gpu: dict[tuple[int, int, int], list[int]] = field(default_factory=dict)
    user: dict[tuple[int, int, str, int], list[int]] = field(default_factory=dict)

    def credit(self, opener: Tick, end_us: int, max_gap_us: int, sign: int = 1) -> None:
        """Credit (sign=1) or un-credit (sign=-1) the interval opened by `opener`."""
        start = opener.observed_us
        length = end_us - start
        if length <= 0 or length > max_gap_us or not opener.gpus:
            return  # a gap is billed to nobody and is not covered time
        host = opener.host_id
        cursor = start
        while cursor < end_us:
            hour = cursor - cursor % HOUR_US
            piece = min(end_us, hour + HOUR_US) - cursor
            for g in opener.gpus:
                row = self.gpu.get((host, g.gpu_id, hour))
                if row is None:
                    row = self.gpu[(host, g.gpu_id, hour)] = [0] * 8
                row[0] += sign * piece
                row[_STATE_SLOT[g.state]] += sign * piece
                row[4] += sign * g.util_pct * piece
                row[5] += sign * g.memory_used_mb * piece
                row[6] += sign * g.memory_total_mb * piece
                # billed_users(g.state, g.holders), inlined: the ingest hot path.
                users = g.holders or (_NOBODY_NAMED if g.state != "idle" else ())
                if users:
                    share = sign * (piece // len(users))
                    for user in users:
                        urow = self.user.get((host, g.gpu_id, user, hour))
                        if urow is None:
                            urow = self.user[(host, g.gpu_id, user, hour)] = [0, 0, 0]
                        urow[0] += share
                        if g.state == "active":
                            urow[1] += share
                        elif g.state == "idle_held":
                            urow[2] += share
            cursor += piece

    def count_samples(self, tick: Tick) -> None:
        hour = tick.observed_us - tick.observed_us % HOUR_US
        for g in tick.gpus:
            row = self.gpu.get((tick.host_id, g.gpu_id, hour))
            if row is None:
                row = self.gpu[(tick.host_id, g.gpu_id, hour)] = [0] * 8
            row[7] += 1

    def credit_insertion(
        self,
        before: Tick | None,
        new: Sequence[Tick],
        after_us: int | None,
        max_gap_us: int,
    ) -> None:
        """New observations landing between two stored ones (either may be absent).

        The interval before→after is replaced by before→new[0]→…→new[-1]→after.
        """
        if not new:
            return
        if before is not None and after_us is not None:
            self.credit(before, after_us, max_gap_us, sign=-1)
        if before is not None:
            self.credit(before, new[0].observed_us, max_gap_us)
        for opener, closer in zip(new, new[1:], strict=False):
            self.credit(opener, closer.observed_us, max_gap_us)
        if after_us is not None:
            self.credit(new[-1], after_us, max_gap_us)
        for tick in new:
            self.count_samples(tick)

    def credit_series(self, ticks: Sequence[Tick], max_gap_us: int) -> None:
        """A host's whole history in time order (the recompute path)."""
        self.credit_insertion(None, ticks, None, max_gap_us)
