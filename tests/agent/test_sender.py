"""Delivery against a real local HTTP server: drop, stop, retry, spool, and the replay."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.client import BoardClient, Timeouts
from agent.fake import FakeCollector
from agent.sender import MAX_REPLAY_FAILURES, Backoff, HostRevoked, Sender
from agent.spool import Spool
from tests.agent.fakes import FakeBoard, Reply

START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
FAKE = FakeCollector("sender-test")
TOKEN = "gua_agent_sender_secret"


def snapshot(n: int) -> bytes:
    """The n-th tick's encoded snapshot, 30 s apart."""
    return json.dumps(FAKE.observation(START + timedelta(seconds=30 * n), host_id="h1")).encode()


def at(n: int) -> str:
    return (START + timedelta(seconds=30 * n)).isoformat()


@pytest.fixture
def make_sender(board: FakeBoard, tmp_path: Path):
    clients: list[BoardClient] = []

    def make(read: float = 2.0, base: float = 0.02, cap: float = 0.05) -> Sender:
        client = BoardClient(board.url, agent_token=TOKEN, timeouts=Timeouts(connect=1, read=read))
        clients.append(client)
        return Sender(client, Spool(tmp_path / "spool"), backoff=Backoff(base=base, cap=cap))

    yield make
    for client in clients:
        client.close()


def budget(seconds: float) -> float:
    return time.monotonic() + seconds


def test_accepted(board: FakeBoard, make_sender) -> None:
    sender = make_sender()
    assert sender.deliver(snapshot(0), budget(2)) == "sent"
    (received,) = board.observations()
    assert received.body == snapshot(0)
    assert received.headers["authorization"] == f"Bearer {TOKEN}"
    assert len(sender.spool) == 0


@pytest.mark.parametrize("status", [400, 403, 404, 409, 413, 422])
def test_other_4xx_dropped_never_retried(
    board: FakeBoard, make_sender, status: int, caplog
) -> None:
    board.answer(Reply(status, {"detail": "observedAt is too old"}))
    sender = make_sender()
    assert sender.deliver(snapshot(0), budget(2)) == "dropped"
    assert sender.deliver(snapshot(1), budget(2)) == "sent"
    assert board.observed_at() == [at(0), at(1)]
    assert len(sender.spool) == 0
    assert f"HTTP {status}: observedAt is too old" in caplog.text


def test_401_stops(board: FakeBoard, make_sender) -> None:
    board.answer(Reply(401, {"detail": "token revoked"}))
    sender = make_sender()
    with pytest.raises(HostRevoked, match="HTTP 401: token revoked"):
        sender.deliver(snapshot(0), budget(2))
    assert len(board.observations()) == 1
    assert len(sender.spool) == 0
    assert sender.pending is None


def test_5xx_retried_then_accepted_within_budget(board: FakeBoard, make_sender) -> None:
    board.answer(Reply(500), Reply(502, b"<html>bad gateway</html>"), Reply(503))
    sender = make_sender()
    assert sender.deliver(snapshot(0), budget(3)) == "sent"
    assert [r.status for r in board.observations()] == [500, 502, 503, 202]
    assert len(sender.spool) == 0


def test_5xx_past_budget_spooled(board: FakeBoard, make_sender) -> None:
    board.default = Reply(500, {"detail": "database down"})
    sender = make_sender()
    started = time.monotonic()
    assert sender.deliver(snapshot(0), budget(0.5)) == "spooled"
    # Bounded by the budget, not retrying for ever (generous: a loaded machine is slow).
    assert time.monotonic() - started < 5.0
    assert len(board.observations()) >= 2  # retried inside the tick
    assert [e.observed_at.isoformat() for e in sender.spool.entries()] == [at(0)]


def test_429_retry_after_honoured_within_budget(board: FakeBoard, make_sender) -> None:
    board.answer(Reply(429, {"detail": "slow down"}, {"Retry-After": "1"}))
    sender = make_sender()
    started = time.monotonic()
    assert sender.deliver(snapshot(0), budget(3)) == "sent"
    assert time.monotonic() - started >= 1.0
    assert [r.status for r in board.observations()] == [429, 202]


def test_retry_after_past_budget_spools_and_holds_off_next_ticks(
    board: FakeBoard, make_sender
) -> None:
    board.answer(Reply(429, {}, {"Retry-After": "1"}))
    sender = make_sender()
    assert sender.deliver(snapshot(0), budget(0.4)) == "spooled"
    # The next tick comes before Retry-After is over: no request at all.
    assert sender.deliver(snapshot(1), budget(0.3)) == "spooled"
    assert len(board.observations()) == 1
    time.sleep(1.0)
    assert sender.deliver(snapshot(2), budget(2)) == "sent"
    # Fresh first, then the spool oldest first.
    assert board.observed_at() == [at(0), at(2), at(0), at(1)]
    assert len(sender.spool) == 0


def test_hung_connection_times_out_and_spools(board: FakeBoard, make_sender) -> None:
    board.answer(Reply(503, hang=30))
    sender = make_sender(read=0.3, base=5, cap=5)
    started = time.monotonic()
    assert sender.deliver(snapshot(0), budget(1.0)) == "spooled"
    assert time.monotonic() - started < 15  # far less than the 30 s hang
    assert len(sender.spool) == 1


def test_an_abandoned_request_leaves_no_traceback(
    board: FakeBoard, make_sender, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent gives up on a hung board; the board's late answer then finds it gone,
    which is no error: nothing printed (http.server printed a BrokenPipeError traceback
    into the test log for each, under tests that passed)."""
    board.answer(Reply(503, body=b"x" * 1_000_000, hang=30))
    sender = make_sender(read=0.3, base=5, cap=5)
    assert sender.deliver(snapshot(0), budget(1.0)) == "spooled"
    board.release.set()  # the board answers now, to a client that has left
    deadline = time.monotonic() + 30
    while board.server.done < 1:
        assert time.monotonic() < deadline, "the board never finished the request"
        time.sleep(0.05)
    assert "Traceback" not in capsys.readouterr().err


def test_request_timeout_bounded_by_tick_budget(board: FakeBoard, make_sender) -> None:
    board.answer(Reply(503, hang=30))
    sender = make_sender(read=60)
    started = time.monotonic()
    assert sender.deliver(snapshot(0), budget(0.5)) == "spooled"
    assert time.monotonic() - started < 15  # the budget, not the 60 s read timeout


def test_dropped_connection_is_retried(board: FakeBoard, make_sender) -> None:
    board.answer(Reply(drop=True))
    sender = make_sender()
    assert sender.deliver(snapshot(0), budget(2)) == "sent"
    assert len(board.observations()) == 2


def test_connection_refused_spools(tmp_path: Path) -> None:
    client = BoardClient("http://127.0.0.1:9", timeouts=Timeouts(connect=0.5, read=0.5))
    sender = Sender(client, Spool(tmp_path), backoff=Backoff(base=0.05, cap=0.1))
    assert sender.deliver(snapshot(0), budget(0.5)) == "spooled"
    client.close()


def test_backoff_carries_across_ticks(board: FakeBoard, make_sender) -> None:
    board.default = Reply(503)
    sender = make_sender(base=2, cap=2)
    assert sender.deliver(snapshot(0), budget(0.3)) == "spooled"
    assert sender.deliver(snapshot(1), budget(0.3)) == "spooled"
    # One attempt; the second tick fell inside the 1-2 s backoff and sent nothing.
    assert len(board.observations()) == 1


def test_outage_then_recovery_replays_oldest_first_none_lost_no_duplicates(
    board: FakeBoard, make_sender
) -> None:
    sender = make_sender(read=0.3)
    board.answer(Reply(422, {"detail": "bad snapshot"}))
    assert sender.deliver(snapshot(0), budget(1)) == "dropped"
    board.answer(Reply(413, {"detail": "too large"}))
    assert sender.deliver(snapshot(1), budget(1)) == "dropped"

    board.default = Reply(500, b"Internal Server Error")
    assert sender.deliver(snapshot(2), budget(0.3)) == "spooled"
    board.default = Reply(502, b"<html>proxy error</html>")
    time.sleep(0.1)
    assert sender.deliver(snapshot(3), budget(0.3)) == "spooled"
    board.default = Reply(429, {"detail": "busy"}, {"Retry-After": "0.2"})
    assert sender.deliver(snapshot(4), budget(0.3)) == "spooled"
    board.default = Reply(503, hang=10)
    time.sleep(0.2)
    assert sender.deliver(snapshot(5), budget(0.8)) == "spooled"
    board.release.set()
    assert [e.observed_at.isoformat() for e in sender.spool.entries()] == [
        at(n) for n in (2, 3, 4, 5)
    ]

    board.default = Reply(202, {"status": "accepted"})
    time.sleep(0.1)
    assert sender.deliver(snapshot(6), budget(5)) == "sent"

    accepted = board.observed_at(status=202)
    assert accepted == [at(6), at(2), at(3), at(4), at(5)]
    assert len(accepted) == len(set(accepted))
    assert len(sender.spool) == 0
    # What was replayed is byte for byte what would have been sent.
    replayed = {r.json["observedAt"]: r.body for r in board.observations() if r.status == 202}
    assert all(replayed[at(n)] == snapshot(n) for n in (2, 3, 4, 5))


def test_replay_survives_restart(board: FakeBoard, make_sender) -> None:
    board.default = Reply(503)
    first = make_sender()
    for n in range(3):
        time.sleep(0.06)
        first.deliver(snapshot(n), budget(0.2))
    assert len(first.spool) == 3
    board.default = Reply(202, {})
    second = make_sender()  # a new process: new objects, same directory
    assert second.deliver(snapshot(3), budget(5)) == "sent"
    assert board.observed_at(status=202) == [at(3), at(0), at(1), at(2)]
    assert len(second.spool) == 0


def test_422_for_spooled_snapshot_drops_it_and_drain_goes_on(board: FakeBoard, make_sender) -> None:
    sender = make_sender()
    for n in range(3):
        sender.spool.put(snapshot(n))
    board.answer(Reply(202), Reply(422, {"detail": "observedAt is older than the retention"}))
    assert sender.deliver(snapshot(9), budget(5)) == "sent"
    assert board.observed_at() == [at(9), at(0), at(1), at(2)]
    assert len(sender.spool) == 0


def test_401_during_drain_stops(board: FakeBoard, make_sender) -> None:
    sender = make_sender()
    sender.spool.put(snapshot(0))
    board.answer(Reply(202), Reply(401, {"detail": "revoked"}))
    with pytest.raises(HostRevoked):
        sender.deliver(snapshot(1), budget(5))
    assert len(sender.spool) == 1  # kept: a re-enrolled host may still want it


def test_drain_stops_at_first_failure_and_keeps_order(board: FakeBoard, make_sender) -> None:
    sender = make_sender(base=5, cap=5)
    for n in range(4):
        sender.spool.put(snapshot(n))
    board.answer(Reply(202), Reply(202), Reply(503))
    assert sender.deliver(snapshot(9), budget(5)) == "sent"
    assert [e.observed_at.isoformat() for e in sender.spool.entries()] == [at(1), at(2), at(3)]


def test_drain_bounded_by_deadline(board: FakeBoard, make_sender) -> None:
    sender = make_sender()
    for n in range(50):
        sender.spool.put(snapshot(n))
    board.default = Reply(202, {}, hang=0.2)
    started = time.monotonic()
    sender.deliver(snapshot(99), budget(1.0))
    assert time.monotonic() - started < 6  # draining all 50 would take over 10 s
    left = len(sender.spool)
    assert 0 < left < 50
    remaining = [e.observed_at.isoformat() for e in sender.spool.entries()]
    assert remaining == [at(n) for n in range(50 - left, 50)]  # the oldest went first


def test_poison_snapshot_dropped_after_repeated_5xx_while_fresh_accepted(
    board: FakeBoard, make_sender
) -> None:
    sender = make_sender(base=0.01, cap=0.01)
    sender.spool.put(snapshot(0))
    for tick in range(MAX_REPLAY_FAILURES):
        assert len(sender.spool) == 1
        time.sleep(0.02)
        board.answer(Reply(202), Reply(500, {"detail": "cannot store this one"}))
        assert sender.deliver(snapshot(10 + tick), budget(2)) == "sent"
    assert len(sender.spool) == 0


def test_outage_never_drops_the_oldest(board: FakeBoard, make_sender) -> None:
    """A 5xx for a spooled snapshot while the fresh one also failed says nothing about it."""
    sender = make_sender(base=0.01, cap=0.01)
    sender.spool.put(snapshot(0))
    board.default = Reply(500)
    for tick in range(MAX_REPLAY_FAILURES + 2):
        time.sleep(0.02)
        sender.deliver(snapshot(10 + tick), budget(0.1))
    assert sender.spool.entries()[0].observed_at.isoformat() == at(0)


def test_stop_abandons_retries_and_spools(board: FakeBoard, make_sender) -> None:
    board.default = Reply(503)
    sender = make_sender(base=10, cap=10)
    sender.stop.set()
    assert sender.deliver(snapshot(0), budget(30)) == "spooled"
    assert board.observations() == []
