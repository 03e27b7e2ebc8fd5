"""usageState across ticks: a pause between steps is not idle-held."""

from __future__ import annotations

from agent.model import Collection, GpuReading, ProcessReading
from agent.usage import UsageTracker, single_tick_state

JOB = (ProcessReading(10, "alice", "python", "compute", 1000),)
DESKTOP = (ProcessReading(11, "gdm", "Xorg", "graphics", 100),)


def gpu(util: int, procs: tuple[ProcessReading, ...] = JOB, **kw: object) -> GpuReading:
    return GpuReading(0, "GPU-0", "A100", 40000, 1000, util, 30, 60, procs, **kw)  # type: ignore[arg-type]


def states(tracker: UsageTracker, ticks: list[tuple[float, GpuReading]]) -> list[str | None]:
    out = []
    for now, reading in ticks:
        applied = tracker.apply(Collection("550", (reading,)), now)
        out.append(applied.gpus[0].usage_state)
    return out


def test_single_tick_rule() -> None:
    assert single_tick_state(gpu(0, ())) == "idle"
    assert single_tick_state(gpu(0, DESKTOP)) == "idle"
    assert single_tick_state(gpu(6)) == "active"
    assert single_tick_state(gpu(5)) == "idle_held"
    assert single_tick_state(gpu(50, processes_ok=False)) is None
    assert single_tick_state(gpu(0, util_ok=False)) == "active"


def test_short_pause_stays_active() -> None:
    tracker = UsageTracker(grace_ticks=3, grace_seconds=60)
    ticks = [(0.0, gpu(90)), (30.0, gpu(2)), (60.0, gpu(1)), (90.0, gpu(95))]
    assert states(tracker, ticks) == ["active", "active", "active", "active"]


def test_long_low_streak_becomes_idle_held_after_ticks_and_seconds() -> None:
    tracker = UsageTracker(grace_ticks=3, grace_seconds=60)
    ticks = [(t * 30.0, gpu(90 if t == 0 else 0)) for t in range(6)]
    # low ticks at 30 s, 60 s (2 ticks), 90 s (3 ticks and 90 s ≥ 60 s) → idle_held
    assert states(tracker, ticks) == [
        "active",
        "active",
        "active",
        "idle_held",
        "idle_held",
        "idle_held",
    ]


def test_fast_ticks_need_the_seconds_too() -> None:
    tracker = UsageTracker(grace_ticks=3, grace_seconds=10)
    ticks = [(0.0, gpu(90))] + [(float(t), gpu(0)) for t in range(1, 13)]
    result = states(tracker, ticks)
    assert result[1:10] == ["active"] * 9  # three ticks passed, ten seconds not yet
    assert result[10:] == ["idle_held"] * 3


def test_slow_ticks_need_the_ticks_too() -> None:
    tracker = UsageTracker(grace_ticks=3, grace_seconds=60)
    ticks = [(0.0, gpu(90)), (300.0, gpu(0)), (600.0, gpu(0)), (900.0, gpu(0))]
    assert states(tracker, ticks) == ["active", "active", "active", "idle_held"]


def test_never_seen_active_is_idle_held_at_once() -> None:
    tracker = UsageTracker()
    assert states(tracker, [(0.0, gpu(0)), (30.0, gpu(0))]) == ["idle_held", "idle_held"]


def test_activity_resets_the_streak() -> None:
    tracker = UsageTracker(grace_ticks=2, grace_seconds=0)
    ticks = [(0.0, gpu(90)), (1.0, gpu(0)), (2.0, gpu(0)), (3.0, gpu(50)), (4.0, gpu(0))]
    assert states(tracker, ticks) == ["active", "active", "idle_held", "active", "active"]


def test_job_ending_forgets_the_grace() -> None:
    tracker = UsageTracker(grace_ticks=3, grace_seconds=60)
    ticks = [(0.0, gpu(90)), (30.0, gpu(0, ())), (60.0, gpu(0))]
    # The next job's first low tick gets no grace from the previous job's activity.
    assert states(tracker, ticks) == ["active", "idle", "idle_held"]


def test_unknown_tick_neither_extends_nor_breaks_the_streak() -> None:
    tracker = UsageTracker(grace_ticks=2, grace_seconds=0)
    ticks = [
        (0.0, gpu(90)),
        (1.0, gpu(0)),
        (2.0, gpu(0, processes_ok=False)),
        (3.0, gpu(0, util_ok=False)),
        (4.0, gpu(0)),
    ]
    assert states(tracker, ticks) == ["active", "active", None, "active", "idle_held"]


def test_zero_grace_is_the_single_tick_rule() -> None:
    tracker = UsageTracker(0, 0)
    assert states(tracker, [(0.0, gpu(90)), (1.0, gpu(0))]) == ["active", "idle_held"]


def test_gpus_tracked_independently() -> None:
    tracker = UsageTracker(grace_ticks=1, grace_seconds=0)
    a = gpu(90)
    b = GpuReading(1, "GPU-1", "A100", 40000, 0, 0, None, None, JOB)
    first = tracker.apply(Collection("550", (a, b)), 0.0)
    assert [g.usage_state for g in first.gpus] == ["active", "idle_held"]
