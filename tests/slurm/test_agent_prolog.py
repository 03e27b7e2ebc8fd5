"""`gua-agent job start|end` as a real Slurm's Prolog and Epilog, against a real HTTP
receiver; and our agent reading a real job process's job id from its cgroup.

The harness's hook (tests/slurm/cluster.py) runs the agent in slurmd's Prolog and
Epilog with the environment slurmd gives them (SLURM_* only, no PATH). Each node gets
its own agent config (its own token, so the receiver tells the nodes apart) and spool.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.procinfo import ProcInfo
from tests.agent.fakes import REPO_ROOT, FakeBoard, Reply, write_config
from tests.slurm.cluster import SlurmCluster, wait_until
from tests.slurm.test_cluster import LONG, idx_of

JOBS = "/agent/v1/jobs"


@pytest.fixture
def receiver() -> Iterator[FakeBoard]:
    server = FakeBoard()
    server.default = Reply(202, {"accepted": 1})
    server.thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.server.shutdown()
        server.server.server_close()


class NodeAgents:
    """Per node: an agent config (token `…_<node>`) and a spool, under one folder."""

    def __init__(self, slurm: SlurmCluster, receiver: FakeBoard, root: Path) -> None:
        self.root = root
        self.receiver = receiver
        for node in slurm.nodes:
            write_config(
                root / f"{node.name}.json",
                serverUrl=receiver.url,
                hostId=f"host-{node.name}",
                agentToken=f"gua_agent_test_{node.name}",
            )

    def script(self, action: str) -> str:
        python, repo = shlex.quote(sys.executable), shlex.quote(str(REPO_ROOT))
        node = f'{shlex.quote(str(self.root))}/"$SLURMD_NODENAME"'
        return (
            "#!/bin/sh\n"
            f"exec env PYTHONPATH={repo} {python} -m agent job {action} --timeout 10s \\\n"
            f"  --config {node}.json --spool-dir {node}-spool\n"
        )

    def records(self, job_id: str) -> list[tuple[str, dict[str, Any]]]:
        """(node, record) of every record the receiver got for `job_id`, in arrival order."""
        found = []
        for request in list(self.receiver.received):
            if request.path != JOBS:
                continue
            node = request.headers["authorization"].rsplit("_", 1)[1]
            found += [(node, r) for r in request.json["jobs"] if r["jobId"] == job_id]
        return found

    def wait(
        self, job_id: str, count: int, timeout: float = 120
    ) -> list[tuple[str, dict[str, Any]]]:
        found: list[tuple[str, dict[str, Any]]] = wait_until(
            lambda: r if len(r := self.records(job_id)) >= count else None,
            f"{count} job record(s) of job {job_id}",
            timeout,
        )
        return found


@pytest.fixture
def agents(slurm: SlurmCluster, receiver: FakeBoard, tmp_path: Path) -> Iterator[NodeAgents]:
    tmp_path.chmod(0o755)
    node_agents = NodeAgents(slurm, receiver, tmp_path)
    with ExitStack() as hooks:
        hooks.enter_context(slurm.hook("prolog_slurmd", node_agents.script("start"), "60-agent"))
        hooks.enter_context(slurm.hook("epilog_slurmd", node_agents.script("end"), "60-agent"))
        yield node_agents


def test_a_job_on_two_gpus_starts_and_ends(slurm: SlurmCluster, agents: NodeAgents) -> None:
    go = slurm.work / "go-two-gpus"
    wait = f"while [ ! -e {go} ]; do sleep 0.2; done"
    job_id = slurm.sbatch("--gres=gpu:2", "-A", "physics", user="nobody", wrap=wait)
    job = slurm.wait_job(job_id, "RUNNING")
    [(node, start)] = agents.wait(job_id, 1)

    assert node == job["nodes"]
    assert start == {
        "cluster": "testlab",
        "jobId": job_id,
        "rawJobId": job_id,
        "restartCount": 0,
        "user": "nobody",
        "account": "physics",
        "partition": "gpu",
        "name": "",
        "state": "RUNNING",
        "startedAt": start["startedAt"],
        "endedAt": None,
        "gpus": idx_of(job["gres_detail"][0]),
    }
    assert len(start["gpus"]) == 2
    # The node's own clock, within a few seconds of Slurm's start time.
    started = datetime.fromisoformat(start["startedAt"])
    assert abs(started.timestamp() - job["start_time"]) < 60

    go.touch()
    slurm.wait_job(job_id, "COMPLETED")
    [_, (end_node, end)] = agents.wait(job_id, 2)
    assert end_node == node
    assert end["state"] == "COMPLETED"
    assert end["startedAt"] == start["startedAt"]
    assert end["endedAt"] is not None
    assert datetime.fromisoformat(end["endedAt"]) >= started
    assert end["gpus"] == start["gpus"]
    assert not list(agents.root.glob("*-spool/jobs/*.json"))  # all sent, nothing waits


def test_a_failed_job_ends_failed(slurm: SlurmCluster, agents: NodeAgents) -> None:
    job_id = slurm.sbatch("--gres=gpu:1", wrap="exit 3")
    slurm.wait_job(job_id, "FAILED")
    [(_, start), (_, end)] = agents.wait(job_id, 2)
    assert (start["state"], end["state"]) == ("RUNNING", "FAILED")


def test_a_requeued_job_is_a_second_run(slurm: SlurmCluster, agents: NodeAgents) -> None:
    job_id = slurm.sbatch("--gres=gpu:1", wrap=LONG)
    slurm.wait_job(job_id, "RUNNING")
    agents.wait(job_id, 1)
    slurm.run("scontrol", "requeue", job_id)
    # Runs again after cred_expire (10 s here): end of run 0, start of run 1.
    records = agents.wait(job_id, 3, timeout=180)
    (_, first), (_, ended), (_, second) = records[:3]
    assert (first["restartCount"], first["state"]) == (0, "RUNNING")
    # The epilog of the first run already sees restart count 1; paired with the
    # prolog this node ran, it is run 0 that ended.
    assert (ended["restartCount"], ended["startedAt"]) == (0, first["startedAt"])
    assert ended["endedAt"] is not None
    assert (second["restartCount"], second["state"], second["endedAt"]) == (1, "RUNNING", None)
    assert second["startedAt"] > first["startedAt"]
    again = slurm.wait_job(job_id, "RUNNING")
    assert second["gpus"] == idx_of(again["gres_detail"][0])


def test_an_epilog_without_its_prolog_asks_scontrol(
    slurm: SlurmCluster, agents: NodeAgents
) -> None:
    """An Epilog with no remembered start (the agent installed while the job ran, a
    wiped state folder) takes scontrol's StartTime, local time read in the node's zone."""
    go = slurm.work / "go-scontrol"
    job_id = slurm.sbatch("--gres=gpu:1", wrap=f"while [ ! -e {go} ]; do sleep 0.2; done")
    job = slurm.wait_job(job_id, "RUNNING")
    agents.wait(job_id, 1)
    for remembered in agents.root.glob(f"*-spool/job-starts/*.{job_id}.*.json"):
        remembered.unlink()
    go.touch()
    slurm.wait_job(job_id, "COMPLETED")
    [_, (_, end)] = agents.wait(job_id, 2)
    started = datetime.fromisoformat(end["startedAt"])
    assert started.tzinfo is not None
    assert started == datetime.fromtimestamp(job["start_time"], UTC)


def test_our_agent_reads_a_job_process_job_id(slurm: SlurmCluster) -> None:
    if not slurm.cgroup:
        pytest.skip(f"jobs run without cgroups here: {slurm.no_cgroup_reason}")
    job_id = slurm.sbatch("--gres=gpu:1", wrap=LONG)
    slurm.wait_job(job_id, "RUNNING")

    def job_ids() -> set[str | None]:
        out = slurm.run("scontrol", "listpids", job_id, check=False)
        pids = [int(line.split()[0]) for line in out.splitlines()[1:] if line.strip()]
        info = ProcInfo()
        return {info.job_id(pid) for pid in pids} - {None}  # a helper may be gone by now

    assert wait_until(job_ids, f"job {job_id}'s processes") == {job_id}
