"""The tick loop: a drift-free schedule, overruns, collection failures, shutdown."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from agent.client import BoardClient
from agent.fake import FakeCollector
from agent.model import Collection
from agent.payload import HostIdentity
from agent.runner import Runner
from agent.sender import Sender
from agent.spool import Spool, entry_name
from tests.agent.fakes import (
    CONFIG_TOKEN,
    FakeBoard,
    ScriptedBoard,
    accepted,
)

EPOCH = datetime(2026, 12, 2, 17, 0, 0, tzinfo=UTC)


class FakeTime(threading.Event):
    """A monotonic clock that only moves when the loop waits or work is simulated."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return EPOCH + timedelta(seconds=self.now - 1000.0)

    def wait(self, timeout: float | None = None) -> bool:
        if not self.is_set() and timeout:
            self.now += timeout
        return self.is_set()


class SlowCollector(FakeCollector):
    """Takes `cost(tick)` seconds of fake time to collect."""

    def __init__(self, clock: FakeTime, cost) -> None:
        super().__init__("slow")
        self.clock, self.cost, self.started = clock, cost, []

    def collect(self, observed_at: datetime | None = None) -> Collection:
        self.started.append(self.clock.now - 1000.0)
        self.clock.now += self.cost(len(self.started) - 1)
        return super().collect(observed_at)


def make_runner(tmp_path: Path, clock: FakeTime, collector, handler=None, interval=10.0) -> Runner:
    transport = httpx.MockTransport(handler or (lambda request: httpx.Response(202, json={})))
    client = BoardClient("http://board.test", agent_token="t", transport=transport)
    sender = Sender(client, Spool(tmp_path / "spool"), stop=clock, clock=clock.monotonic)
    host = HostIdentity("slow", "0.1.0", "h1", "Slow")
    return Runner(
        collector, sender, host, interval=interval, monotonic=clock.monotonic, wall=clock.wall
    )


def test_schedule_does_not_drift_with_work(tmp_path: Path) -> None:
    clock = FakeTime()
    collector = SlowCollector(clock, lambda tick: 3.0)
    make_runner(tmp_path, clock, collector).run(max_ticks=5)
    # sleep(interval) after the work would give 0, 13, 26, ...
    assert collector.started == [0.0, 10.0, 20.0, 30.0, 40.0]


def test_overrun_skips_missed_ticks_instead_of_bursting(tmp_path: Path) -> None:
    clock = FakeTime()
    collector = SlowCollector(clock, lambda tick: 25.0 if tick == 1 else 1.0)
    make_runner(tmp_path, clock, collector).run(max_ticks=4)
    assert collector.started == [0.0, 10.0, 40.0, 50.0]


def test_observed_at_is_wall_time_of_each_tick(tmp_path: Path) -> None:
    clock = FakeTime()
    bodies: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(202)

    make_runner(tmp_path, clock, FakeCollector("x"), handler, interval=30).run(max_ticks=3)
    assert [b["observedAt"] for b in bodies] == [
        (EPOCH + timedelta(seconds=s)).isoformat() for s in (0, 30, 60)
    ]


def test_collector_crash_becomes_error_heartbeat(tmp_path: Path) -> None:
    class Broken(FakeCollector):
        def collect(self, observed_at: datetime | None = None) -> Collection:
            raise RuntimeError("unexpected NVML shape")

    clock = FakeTime()
    bodies: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(202)

    runner = make_runner(tmp_path, clock, Broken("x"), handler)
    runner.run(max_ticks=2)
    assert [(b["collectionStatus"], b["errors"], b["gpus"]) for b in bodies] == [
        ("error", ["collection_failed"], [])
    ] * 2


def test_stop_before_send_spools_the_snapshot(tmp_path: Path) -> None:
    clock = FakeTime()

    class StopsDuringCollect(FakeCollector):
        def collect(self, observed_at: datetime | None = None) -> Collection:
            clock.set()  # SIGTERM arrives while NVML is being read
            return super().collect(observed_at)

    requests: list[httpx.Request] = []
    runner = make_runner(
        tmp_path,
        clock,
        StopsDuringCollect("x"),
        lambda r: requests.append(r) or httpx.Response(202),
    )
    runner.run()
    assert requests == []
    assert runner.last_outcome == "spooled"
    assert len(runner.sender.spool) == 1


def test_single_tick_rule_with_zero_grace(tmp_path: Path) -> None:
    from agent.usage import UsageTracker

    clock = FakeTime()
    runner = make_runner(tmp_path, clock, FakeCollector("x"))
    runner.tracker = UsageTracker(0, 0)
    body = json.loads(runner.snapshot())
    assert [g["usageState"] for g in body["gpus"]] == ["active", "idle_held", "idle", "active"]


def test_fastest_interval_sends_every_tick(board: FakeBoard, tmp_path: Path) -> None:
    with BoardClient(board.url, agent_token="t") as client:
        sender = Sender(client, Spool(tmp_path / "spool"))
        runner = Runner(FakeCollector("fast"), sender, HostIdentity("fast", "0"), interval=0.2)
        started = time.monotonic()
        runner.run(max_ticks=6)
    # Never faster than the interval; the upper bound only says it did not wait for long.
    assert 1.0 <= time.monotonic() - started < 10
    assert len(board.observed_at(status=202)) == 6
    assert len(sender.spool) == 0


def _directory_named_like_an_entry(spool: Path) -> None:
    spool.mkdir()
    (spool / entry_name(datetime.now(UTC))).mkdir()


def _symlink_loop_named_like_an_entry(spool: Path) -> None:
    spool.mkdir()
    entry = spool / entry_name(datetime.now(UTC))
    entry.symlink_to(entry)


def _spool_path_is_a_file(spool: Path) -> None:
    spool.write_text("not a directory")


@pytest.mark.parametrize(
    "corrupt",
    [_directory_named_like_an_entry, _symlink_loop_named_like_an_entry, _spool_path_is_a_file],
    ids=["entry-is-a-directory", "entry-symlink-loop", "spool-is-a-file"],
)
def test_a_corrupt_spool_does_not_end_the_tick_loop(
    tmp_path: Path,
    fake_board: Callable[[Callable[[socket.socket], None]], ScriptedBoard],
    corrupt: Callable[[Path], None],
) -> None:
    """Was: after the fresh snapshot was accepted, the replay of the spool raised out of
    Runner.run: IsADirectoryError ("[Errno 21] Is a directory: …/20261204T143734.751784Z
    .json") from Spool.read for a directory named like an entry, OSError ("[Errno 40] Too
    many levels of symbolic links") from Spool.entries' stat for a symlink loop, and
    NotADirectoryError from Spool._remove_stale_temps' listdir when the spool path is a
    file. Spool.read catches FileNotFoundError only and Sender.drain nothing, so one
    bad entry ends `gua-agent run` with a traceback on every start (systemd restarts it,
    it dies again on its first tick): the host goes dark. A spool entry that cannot be
    read must be skipped (or set aside) and the loop must keep ticking."""
    spool_dir = tmp_path / "spool"
    corrupt(spool_dir)
    b = fake_board(accepted)
    with BoardClient(b.url, agent_token=CONFIG_TOKEN) as client:
        runner = Runner(
            FakeCollector("node-13"),
            Sender(client, Spool(spool_dir)),
            HostIdentity("node-13", "1.0.0"),
            interval=0.3,
        )
        runner.run(max_ticks=3)
    assert (runner.ticks, runner.last_outcome) == (3, "sent")
