"""usageState per GPU: `active`, `idle_held` or `idle`.

Single tick (the contract's rule, used by `push-once`): no compute process → idle;
utilization above 5 % → active; else idle_held.

Across ticks (`run`), a GPU whose job merely pauses between steps (data loading,
checkpointing, evaluation) must not be called idle-held. A GPU with compute
processes and utilization ≤ 5 % stays `active` while it is in a grace period after
its last tick above 5 %; it becomes `idle_held` once utilization has stayed ≤ 5 % for
at least `grace_ticks` consecutive ticks *and* `grace_seconds` since that last active
tick. A GPU the agent has not seen above 5 % since it last had no compute process (or
since the agent started) gets no grace: it is `idle_held` at once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from agent.model import IDLE_UTIL_PCT, Collection, GpuReading, UsageState

DEFAULT_GRACE_TICKS = 3
DEFAULT_GRACE_SECONDS = 60.0


def single_tick_state(gpu: GpuReading) -> UsageState | None:
    """The contract's one-tick rule; None when the process list is unknown."""
    if not gpu.processes_ok:
        return None
    if not gpu.has_compute_process:
        return "idle"
    if gpu.util_pct > IDLE_UTIL_PCT or not gpu.util_ok:
        # Without a utilization reading nobody is called idle-held.
        return "active"
    return "idle_held"


@dataclass(slots=True)
class _Streak:
    last_active_at: float | None = None
    low_ticks: int = 0


class UsageTracker:
    """Applies the streak rule above across ticks; keep one per running agent."""

    def __init__(
        self,
        grace_ticks: int = DEFAULT_GRACE_TICKS,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
    ) -> None:
        self.grace_ticks = grace_ticks
        self.grace_seconds = grace_seconds
        self._streaks: dict[str, _Streak] = {}

    def apply(self, collection: Collection, now: float) -> Collection:
        """Return the collection with `usage_state` set on each GPU; `now` is monotonic seconds."""
        gpus = tuple(
            dataclasses.replace(gpu, usage_state=self._state(gpu, now)) for gpu in collection.gpus
        )
        return dataclasses.replace(collection, gpus=gpus)

    def _state(self, gpu: GpuReading, now: float) -> UsageState | None:
        state = single_tick_state(gpu)
        streak = self._streaks.setdefault(gpu.uuid, _Streak())
        if not gpu.util_ok or not gpu.processes_ok:
            # Nothing is known about this tick's use; neither extend nor break the streak.
            return state
        if state == "idle":
            self._streaks[gpu.uuid] = _Streak()
        elif state == "active":
            streak.last_active_at = now
            streak.low_ticks = 0
        else:
            streak.low_ticks += 1
            if streak.last_active_at is not None and (
                streak.low_ticks < self.grace_ticks
                or now - streak.last_active_at < self.grace_seconds
            ):
                return "active"
        return state
