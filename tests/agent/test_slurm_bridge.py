"""The bridge against a real HTTP board stand-in (tests/agent/fakes.py): which records it
sends for the 22.05 capture, ends it sees and ends it does not, requeues, only what
changed, batches, the hourly resend, a board that is down or refuses a record."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from agent.client import Timeouts
from agent.slurm_bridge import Bridge, JobsClient
from agent.slurm_runs import BridgeState
from agent.slurm_squeue import SqueueError, SqueueListing, parse_squeue
from tests.agent.fakes import FakeBoard, Reply

DATA = Path(__file__).resolve().parents[1] / "slurm" / "data"
TOKEN = "gua_pat_bridge-secret-0123456789"
T0 = 1796419200  # just after the capture was taken


def sample_jobs() -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = json.loads((DATA / "squeue.json").read_text())["jobs"]
    return jobs


class Squeue:
    """What squeue prints next: a list of job entries, or an error."""

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.jobs = jobs
        self.fail: str | None = None

        self.errors: list[dict[str, str]] = []

    def __call__(self) -> SqueueListing:
        if self.fail:
            raise SqueueError(self.fail)
        return parse_squeue(json.dumps({"jobs": self.jobs, "errors": self.errors}).encode())

    def job(self, raw: int) -> dict[str, Any]:
        return next(j for j in self.jobs if j["job_id"] == raw)

    def drop(self, raw: int) -> None:
        self.jobs = [j for j in self.jobs if j["job_id"] != raw]


class Clock:
    def __init__(self) -> None:
        self.now = float(T0)

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def squeue() -> Squeue:
    return Squeue(sample_jobs())


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_bridge(
    board: FakeBoard, squeue: Squeue, clock: Clock, state_dir: Path, **options: Any
) -> Bridge:
    client = JobsClient(board.url, TOKEN, "acme", Timeouts(connect=2, read=5))
    state = BridgeState(state_dir)
    state.load()
    return Bridge(client, state, squeue, clock=clock, **options)


@pytest.fixture
def bridge(board: FakeBoard, squeue: Squeue, clock: Clock, tmp_path: Path) -> Bridge:
    return make_bridge(board, squeue, clock, tmp_path / "state")


def step(bridge: Bridge, clock: Clock, seconds: float = 30) -> int:
    clock.now += seconds
    assert bridge.poll()
    return bridge.post()


def posted(board: FakeBoard, since: int = 0) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for request in board.received[since:]:
        assert request.path == "/api/v1/workspaces/acme/jobs"
        records.extend(request.json["jobs"])
    return records


def by_id(records: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["rawJobId"], r["restartCount"]): r for r in records}


def test_the_first_poll_sends_the_running_gpu_jobs(
    bridge: Bridge, board: FakeBoard, clock: Clock
) -> None:
    assert step(bridge, clock, 0) == 0
    [request] = board.received
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    records = by_id(posted(board))
    # Running: the trainer, the two-node job, three array tasks. Not: the two pending
    # jobs, and the job that ended in its first second (no time allocated, never seen).
    assert sorted(records) == [(str(n), 0) for n in (198001, 198002, 198005, 198006, 198007)]
    assert records[("198002", 0)] == {
        "cluster": "testlab",
        "jobId": "198002",
        "rawJobId": "198002",
        "restartCount": 0,
        "user": "root",
        "account": "vision",
        "partition": "gpu",
        "name": "wide",
        "state": "RUNNING",
        "startedAt": "2026-12-04T21:19:18Z",
        "endedAt": None,  # squeue's end_time of a running job is its time limit
        "allocations": [{"hostname": "node1", "gpus": [3]}, {"hostname": "node2", "gpus": [0]}],
    }
    task = records[("198005", 0)]
    assert (task["jobId"], task["allocations"]) == (
        "198004_0",
        [{"hostname": "node2", "gpus": [1]}],
    )
    assert records[("198001", 0)]["allocations"] == [{"hostname": "node1", "gpus": [0, 1, 2]}]


def test_only_what_changed_is_sent_again(
    bridge: Bridge, board: FakeBoard, squeue: Squeue, clock: Clock
) -> None:
    step(bridge, clock, 0)
    step(bridge, clock)
    assert len(board.received) == 1  # nothing changed

    trainer = squeue.job(198001)
    trainer.update(job_state="COMPLETED", end_time=T0 + 40, gres_detail=[])
    step(bridge, clock)
    [ended] = posted(board, 1)
    assert (ended["rawJobId"], ended["state"]) == ("198001", "COMPLETED")
    assert ended["endedAt"] == "2026-12-04T21:20:40Z"
    # squeue forgot them; the record carries those seen while it ran
    assert ended["allocations"] == [{"hostname": "node1", "gpus": [0, 1, 2]}]

    # Gone from squeue after MinJobAge, ended and sent: nothing more to say.
    squeue.drop(198001)
    step(bridge, clock)
    assert len(board.received) == 2
    assert ("testlab", "198001", 0) not in bridge.state.runs


def test_a_job_that_vanishes_while_running_is_closed_at_the_last_poll_that_saw_it(
    bridge: Bridge, board: FakeBoard, squeue: Squeue, clock: Clock
) -> None:
    step(bridge, clock, 0)
    step(bridge, clock, 30)  # seen running at T0 + 30
    squeue.drop(198002)
    step(bridge, clock, 600)
    [closed] = posted(board, 1)
    assert closed["rawJobId"] == "198002"
    assert (closed["state"], closed["endedAt"]) == ("UNKNOWN_END", "2026-12-04T21:20:30Z")
    assert closed["allocations"] == [
        {"hostname": "node1", "gpus": [3]},
        {"hostname": "node2", "gpus": [0]},
    ]


def test_a_requeued_job_is_two_runs(
    bridge: Bridge, board: FakeBoard, squeue: Squeue, clock: Clock
) -> None:
    step(bridge, clock, 0)
    job = squeue.job(198001)
    # Requeued: COMPLETING with the restart count already raised, end_time the real end.
    job.update(job_state="COMPLETING", restart_cnt=1, end_time=T0 + 20)
    step(bridge, clock)
    [first] = posted(board, 1)
    assert (first["restartCount"], first["state"]) == (0, "REQUEUED")
    assert first["endedAt"] == "2026-12-04T21:20:20Z"

    job.update(job_state="PENDING", gres_detail=[], start_time=T0 + 500, end_time=T0 + 9**9)
    step(bridge, clock)
    assert len(board.received) == 2  # waiting: nothing to say

    job.update(job_state="RUNNING", start_time=T0 + 100, end_time=T0 + 100 + 365 * 86400)
    job["gres_detail"] = ["gpu:1(IDX:3)"]
    step(bridge, clock)
    [second] = posted(board, 2)
    assert (second["rawJobId"], second["restartCount"], second["jobId"]) == ("198001", 1, "198001")
    assert (second["startedAt"], second["endedAt"]) == ("2026-12-04T21:21:40Z", None)
    assert second["allocations"] == [{"hostname": "node1", "gpus": [3]}]


def test_a_requeue_seen_only_as_pending_ends_at_the_last_poll_that_saw_it_run(
    bridge: Bridge, board: FakeBoard, squeue: Squeue, clock: Clock
) -> None:
    step(bridge, clock, 0)
    squeue.job(198001).update(job_state="PENDING", restart_cnt=1, gres_detail=[])
    step(bridge, clock)
    [first] = posted(board, 1)
    assert (first["restartCount"], first["state"]) == (0, "REQUEUED")
    assert first["endedAt"] == "2026-12-04T21:20:00Z"


def test_the_board_down_keeps_the_records_across_a_restart(
    board: FakeBoard, squeue: Squeue, clock: Clock, tmp_path: Path
) -> None:
    board.default = Reply(503, {"detail": "Down for maintenance."})
    first = make_bridge(board, squeue, clock, tmp_path / "state")
    assert step(first, clock, 0) == 5
    assert step(first, clock, 2) == 5  # backing off (5 s): not tried again yet
    assert len(board.received) == 1

    squeue.job(198002).update(job_state="CANCELLED", end_time=T0 + 50, gres_detail=[])
    board.default = Reply(202, {"accepted": 5, "unmatchedHosts": []})
    again = make_bridge(board, squeue, clock, tmp_path / "state")  # a restarted bridge
    assert step(again, clock) == 0
    records = by_id(posted(board, 1))
    assert len(records) == 5
    assert records[("198002", 0)]["state"] == "CANCELLED"
    assert records[("198002", 0)]["allocations"] == [
        {"hostname": "node1", "gpus": [3]},
        {"hostname": "node2", "gpus": [0]},
    ]  # the board never had them: the allocation seen while it ran is still sent


def test_records_go_in_batches(
    board: FakeBoard, squeue: Squeue, clock: Clock, tmp_path: Path
) -> None:
    bridge = make_bridge(board, squeue, clock, tmp_path / "state", batch_size=2)
    step(bridge, clock, 0)
    assert [len(r.json["jobs"]) for r in board.received] == [2, 2, 1]


def test_everything_is_sent_again_every_hour(
    bridge: Bridge, board: FakeBoard, clock: Clock
) -> None:
    step(bridge, clock, 0)
    step(bridge, clock, 1800)
    assert len(board.received) == 1
    step(bridge, clock, 1800)
    assert len(posted(board, 1)) == 5


def test_a_refused_record_is_found_and_dropped(
    bridge: Bridge, board: FakeBoard, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    bad = Reply(422, {"detail": "Job records are invalid."})
    # 5 records -> 422; halves 2 and 3; the 2 pass; the 3 -> 422; 1 passes; 2 -> 422;
    # the last two: one refused, one passes.
    board.answer(bad, Reply(202, {}), bad, Reply(202, {}), bad, bad, Reply(202, {}))
    with caplog.at_level(logging.ERROR):
        assert step(bridge, clock, 0) == 0
    assert [len(r.json["jobs"]) for r in board.received] == [5, 2, 3, 1, 2, 1, 1]
    assert "the board refused job" in caplog.text
    assert "Job records are invalid." in caplog.text
    step(bridge, clock)
    assert len(board.received) == 7  # not sent again while unchanged


def test_a_refused_token_backs_off_and_is_never_logged(
    bridge: Bridge, board: FakeBoard, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    board.default = Reply(401, {"detail": f"Bad token {TOKEN}"})
    from agent.logs import redact, setup_logging

    setup_logging("INFO")
    redact(TOKEN)
    with caplog.at_level(logging.INFO):
        assert step(bridge, clock, 0) == 5
    assert "refused the token" in caplog.text
    assert bridge.next_post_at > clock.now


def test_squeue_failing_changes_nothing(
    bridge: Bridge, board: FakeBoard, squeue: Squeue, clock: Clock
) -> None:
    step(bridge, clock, 0)
    squeue.fail = "squeue exited 1: slurm_load_jobs error: Unable to contact slurm controller"
    clock.now += 30
    assert not bridge.poll()
    assert bridge.post() == 0
    assert len(board.received) == 1  # no job was taken for vanished


def test_a_listing_with_errors_takes_no_job_for_vanished(
    bridge: Bridge, board: FakeBoard, squeue: Squeue, clock: Clock
) -> None:
    step(bridge, clock, 0)
    squeue.drop(198002)
    squeue.errors = [{"error": "partial answer"}]
    step(bridge, clock)
    assert len(board.received) == 1
    squeue.errors = []
    step(bridge, clock)
    [closed] = posted(board, 1)
    assert (closed["rawJobId"], closed["state"]) == ("198002", "UNKNOWN_END")


def test_a_cpu_only_job_is_not_sent(
    bridge: Bridge, board: FakeBoard, squeue: Squeue, clock: Clock
) -> None:
    squeue.job(198001).update(tres_per_node="", gres_detail=[])
    step(bridge, clock, 0)
    assert ("198001", 0) not in by_id(posted(board))


def test_cluster_override_and_unmatched_hosts(
    board: FakeBoard, squeue: Squeue, clock: Clock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    board.default = Reply(202, {"accepted": 5, "unmatchedHosts": ["node2"]})
    bridge = make_bridge(board, squeue, clock, tmp_path / "state")
    bridge.state.cluster = "hpc1"
    with caplog.at_level(logging.WARNING):
        step(bridge, clock, 0)
    assert {r["cluster"] for r in posted(board)} == {"hpc1"}
    assert "no host named node2" in caplog.text


def test_an_unreadable_state_file_starts_afresh(
    board: FakeBoard, squeue: Squeue, clock: Clock, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "slurm-bridge-state.json").write_text('{"runs": [{"record": 5}, 7]')
    bridge = make_bridge(board, squeue, clock, state)
    step(bridge, clock, 0)
    assert len(posted(board)) == 5
    saved = json.loads((state / "slurm-bridge-state.json").read_text())
    assert len(saved["runs"]) == 5
    assert TOKEN not in (state / "slurm-bridge-state.json").read_text()
