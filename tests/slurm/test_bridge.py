"""`gua-agent slurm-bridge --once` against the real Slurm of tests/slurm, posting to a
real HTTP receiver: a 2-GPU job, an array, a job on two nodes, a requeued job."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.fakes import FakeBoard
from tests.slurm.cluster import SlurmCluster, wait_until

ROOT = Path(__file__).resolve().parents[2]
LONG = "sleep 300"
TOKEN = "gua_pat_slurm-bridge-test"


@pytest.fixture
def board() -> Iterator[FakeBoard]:
    server = FakeBoard()
    server.thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.server.shutdown()
        server.server.server_close()


class BridgeRun:
    """Runs the bridge once per call with one state dir; returns what it posted then."""

    def __init__(self, slurm: SlurmCluster, board: FakeBoard, state: Path) -> None:
        self.slurm, self.board, self.state = slurm, board, state

    def __call__(self) -> list[dict[str, Any]]:
        seen = len(self.board.received)
        env = self.slurm.env()
        env["GUA_BRIDGE_TOKEN"] = TOKEN
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        argv = [
            sys.executable, "-m", "agent", "slurm-bridge", "--once",
            "--server-url", self.board.url, "--workspace", "lab",
            "--state-dir", str(self.state),
        ]  # fmt: skip
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert TOKEN not in done.stderr
        records: list[dict[str, Any]] = []
        for request in self.board.received[seen:]:
            assert request.path == "/api/v1/workspaces/lab/jobs"
            assert request.headers["authorization"] == f"Bearer {TOKEN}"
            records.extend(request.json["jobs"])
        return records


@pytest.fixture
def bridge(slurm: SlurmCluster, board: FakeBoard, tmp_path: Path) -> BridgeRun:
    return BridgeRun(slurm, board, tmp_path / "state")


def gpus(detail: str) -> list[int]:
    """'gpu:2(IDX:0-1)' -> [0, 1] (the harness's own reading, to compare with)."""
    inner = detail.split("IDX:", 1)[1].rstrip(")")
    found: list[int] = []
    for part in inner.split(","):
        low, _, high = part.partition("-")
        found.extend(range(int(low), int(high or low) + 1))
    return found


def mine(records: list[dict[str, Any]], *raw_ids: int | str) -> dict[tuple[str, int], Any]:
    """The records of these jobs (the cluster lists other tests' ended jobs too)."""
    wanted = {str(r) for r in raw_ids}
    return {(r["rawJobId"], r["restartCount"]): r for r in records if r["rawJobId"] in wanted}


def test_a_two_gpu_job_while_it_runs_and_once_it_ended(
    slurm: SlurmCluster, bridge: BridgeRun
) -> None:
    job_id = slurm.sbatch("--gres=gpu:2", "-A", "physics", "-J", "trainer", wrap=LONG)
    job = slurm.wait_job(job_id, "RUNNING")
    [record] = mine(bridge(), job_id).values()
    assert record["cluster"] == "testlab"
    assert (record["jobId"], record["rawJobId"], record["restartCount"]) == (job_id, job_id, 0)
    assert (record["user"], record["account"], record["name"]) == ("root", "physics", "trainer")
    assert (record["partition"], record["state"], record["endedAt"]) == ("gpu", "RUNNING", None)
    assert record["allocations"] == [
        {"hostname": job["nodes"], "gpus": gpus(job["gres_detail"][0])}
    ]
    assert len(record["allocations"][0]["gpus"]) == 2

    assert mine(bridge(), job_id) == {}  # unchanged: not sent again

    slurm.run("scancel", job_id)
    ended = slurm.wait_job(job_id, "CANCELLED")
    assert ended["gres_detail"] == []
    [last] = mine(bridge(), job_id).values()
    assert last["state"] == "CANCELLED"
    assert last["endedAt"] is not None
    assert last["startedAt"] <= last["endedAt"]
    assert last["allocations"] == record["allocations"]  # as seen while it ran


def test_an_array_job(slurm: SlurmCluster, bridge: BridgeRun) -> None:
    array_id = slurm.sbatch("--array=0-2", "--gres=gpu:1", wrap=LONG)
    wait_until(
        lambda: [t["job_state"] for t in slurm.array_tasks(array_id)] == ["RUNNING"] * 3,
        "the three array tasks to run",
    )
    tasks = slurm.array_tasks(array_id)
    records = mine(bridge(), *(t["job_id"] for t in tasks))
    assert len(records) == 3
    for task in tasks:
        record = records[(str(task["job_id"]), 0)]
        assert record["jobId"] == f"{array_id}_{task['array_task_id']}"
        assert record["allocations"] == [
            {"hostname": task["nodes"], "gpus": gpus(task["gres_detail"][0])}
        ]


def test_a_job_on_two_nodes(slurm: SlurmCluster, bridge: BridgeRun) -> None:
    job_id = slurm.sbatch("-N", "2", "--gres=gpu:2", wrap=LONG)
    job = slurm.wait_job(job_id, "RUNNING")
    [record] = mine(bridge(), job_id).values()
    names = [n["nodename"] for n in job["job_resources"]["allocated_nodes"]]
    assert [a["hostname"] for a in record["allocations"]] == names == ["node1", "node2"]
    for allocation, detail in zip(record["allocations"], job["gres_detail"], strict=True):
        assert allocation["gpus"] == gpus(detail)
        assert len(allocation["gpus"]) == 2


def test_a_requeued_job_is_two_runs(slurm: SlurmCluster, bridge: BridgeRun) -> None:
    job_id = slurm.sbatch("--gres=gpu:1", wrap=LONG)
    first = slurm.wait_job(job_id, "RUNNING")
    [run0] = mine(bridge(), job_id).values()
    assert (run0["restartCount"], run0["endedAt"]) == (0, None)

    slurm.run("scontrol", "requeue", job_id)
    wait_until(
        lambda: (j := slurm.job(job_id)) and j["restart_cnt"] == 1 and j["job_state"] != "RUNNING",
        "the job to be requeued",
    )
    records = mine(bridge(), job_id)
    closed = records[(job_id, 0)]
    assert closed["state"] == "REQUEUED"
    assert closed["startedAt"] == run0["startedAt"]
    assert closed["endedAt"] is not None
    assert closed["endedAt"] >= closed["startedAt"]
    assert closed["allocations"] == run0["allocations"]

    # Pending for cred_expire (10 s here), then a second run under the same id.
    again = wait_until(
        lambda: (j := slurm.job(job_id)) and j["job_state"] == "RUNNING" and j,
        "the requeued job to run again",
        timeout=120,
    )
    assert again["start_time"] > first["start_time"]
    records = mine(bridge(), job_id)
    run1 = records[(job_id, 1)]
    assert (run1["jobId"], run1["state"], run1["endedAt"]) == (job_id, "RUNNING", None)
    assert run1["startedAt"] > run0["startedAt"]
    assert run1["allocations"] == [
        {"hostname": again["nodes"], "gpus": gpus(again["gres_detail"][0])}
    ]
