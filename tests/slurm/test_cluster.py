"""The harness against the real Slurm: what squeue --json, scontrol show job -d, the
prolog and epilog, and a job's cgroup tell about a job and its GPUs.

These pin down what the board's job ingest will read (docs/slurm-notes.md); the samples
in tests/slurm/data come from the same commands (tests/slurm/capture_samples.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.slurm.cluster import SlurmCluster, wait_until

LONG = "sleep 300"  # ended by the fixture's reset, never by its own time


def indices(text: str) -> list[int]:
    """ "0-1,3" (a GRES IDX list, SLURM_JOB_GPUS) -> [0, 1, 3]."""
    found: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        found.extend(range(int(low), int(high or low) + 1))
    return found


def idx_of(gres_detail: str) -> list[int]:
    """'gpu:2(IDX:0-1)' -> [0, 1]."""
    match = re.fullmatch(r"gpu(?::[^:(]+)?:\d+\(IDX:([\d,-]+)\)", gres_detail)
    assert match, gres_detail
    return indices(match.group(1))


def test_cluster_has_two_nodes_of_four_gpus(slurm: SlurmCluster) -> None:
    out = slurm.run("sinfo", "-h", "-N", "-o", "%N %G %T")
    assert sorted(out.split("\n")[:-1]) == ["node1 gpu:4 idle", "node2 gpu:4 idle"]


def test_gres_indices_of_a_running_job(slurm: SlurmCluster) -> None:
    job_id = slurm.sbatch("--gres=gpu:2", "-A", "physics", "-J", "trainer", wrap=LONG)
    job = slurm.wait_job(job_id, "RUNNING")

    assert job["cluster"] == "testlab"
    assert (job["name"], job["account"], job["partition"]) == ("trainer", "physics", "gpu")
    assert (job["user_name"], job["user_id"]) == ("root", 0)
    assert job["array_job_id"] == 0
    assert job["array_task_id"] is None
    node = job["nodes"]
    assert node in ("node1", "node2")
    assert [n["nodename"] for n in job["job_resources"]["allocated_nodes"]] == [node]
    [detail] = job["gres_detail"]
    gpus = idx_of(detail)
    assert len(gpus) == 2
    assert set(gpus) <= {0, 1, 2, 3}
    # A running job's end_time is not an end: about start + time limit, a year where the
    # partition has none (time_limit 525600 minutes, or null: it depends on which
    # scheduler started the job, and end_time may be a second off).
    assert job["start_time"] > 0
    assert job["end_time"] - job["start_time"] > 364 * 86400

    text = slurm.show_job(job_id)
    assert re.search(rf"^\s+Nodes={node} .*GRES={re.escape(detail)}$", text, re.M), text
    assert "JOB_GRES=gpu:2" in text

    prolog = slurm.wait_records("prolog_slurmd", job_id)[node]
    assert indices(prolog["SLURM_JOB_GPUS"]) == gpus
    assert indices(prolog["CUDA_VISIBLE_DEVICES"]) == gpus


def test_an_ended_job_keeps_its_node_but_not_its_gres_indices(slurm: SlurmCluster) -> None:
    """The bridge must read a job's IDX while it runs: squeue forgets them at the end."""
    job_id = slurm.sbatch("--gres=gpu:1", wrap="true")
    job = slurm.wait_job(job_id, "COMPLETED")
    assert job["nodes"] in ("node1", "node2")
    assert job["gres_detail"] == []
    assert 0 < job["start_time"] <= job["end_time"]
    assert slurm.wait_records("epilog_slurmd", job_id)[job["nodes"]]["SLURM_JOB_EXIT_CODE"] == "0"


def test_a_job_across_two_nodes(slurm: SlurmCluster) -> None:
    job_id = slurm.sbatch("-N", "2", "--gres=gpu:3", wrap=LONG)
    job = slurm.wait_job(job_id, "RUNNING")

    assert job["nodes"] == "node[1-2]"  # a hostlist expression, not a list
    names = [n["nodename"] for n in job["job_resources"]["allocated_nodes"]]
    assert names == ["node1", "node2"]
    # One gres_detail entry per node, in the order of job_resources.allocated_nodes.
    assert len(job["gres_detail"]) == 2
    per_node = dict(zip(names, (idx_of(d) for d in job["gres_detail"]), strict=True))
    assert all(len(gpus) == 3 for gpus in per_node.values())

    prologs = slurm.wait_records("prolog_slurmd", job_id, nodes=2)
    for name in names:
        assert indices(prologs[name]["SLURM_JOB_GPUS"]) == per_node[name]
        assert prologs[name]["SLURMD_NODENAME"] == name
        assert prologs[name]["SLURM_NODELIST"] == "node[1-2]"
    # scontrol folds nodes with the same CPUs and GRES into one hostlist line.
    lines = re.findall(r"^\s+Nodes=(\S+) .*GRES=(\S+)$", slurm.show_job(job_id), re.M)
    assert lines
    assert sum(len(idx_of(gres)) for _, gres in lines) in (3, 6)


def test_an_array_job(slurm: SlurmCluster) -> None:
    array_id = slurm.sbatch("--array=0-2", "--gres=gpu:1", wrap=f"cat /proc/self/cgroup; {LONG}")
    wait_until(
        lambda: [t["job_state"] for t in slurm.array_tasks(array_id)] == ["RUNNING"] * 3,
        "the three array tasks to run",
    )
    tasks = slurm.array_tasks(array_id)
    assert [t["array_task_id"] for t in tasks] == [0, 1, 2]
    assert all(t["array_job_id"] == int(array_id) for t in tasks)
    # Each task has a job id of its own; one of them (the last to start) keeps the
    # array's id: 74000_0 -> 74001, 74000_1 -> 74002, 74000_2 -> 74000.
    raw_ids = [t["job_id"] for t in tasks]
    assert len(set(raw_ids)) == 3
    assert int(array_id) in raw_ids

    for task in tasks:
        prolog = slurm.wait_records("prolog_slurmd", task["job_id"])[task["nodes"]]
        # The node's prolog names the task by its own id only (no array ids in 22.05);
        # the controller's prolog has the array's ids.
        assert prolog["SLURM_JOB_ID"] == str(task["job_id"])
        assert indices(prolog["SLURM_JOB_GPUS"]) == idx_of(task["gres_detail"][0])
        controller = slurm.wait_records("prolog_slurmctld", task["job_id"])["controller"]
        assert controller["SLURM_ARRAY_JOB_ID"] == array_id
        assert controller["SLURM_ARRAY_TASK_ID"] == str(task["array_task_id"])

    if slurm.cgroup:
        for task in tasks:
            text = slurm.output(f"{array_id}_{task['array_task_id']}", "job_")
            assert f"/job_{task['job_id']}/" in text


def test_a_requeued_job_runs_again_under_the_same_id(slurm: SlurmCluster) -> None:
    job_id = slurm.sbatch("--gres=gpu:1", wrap=LONG)
    first = slurm.wait_job(job_id, "RUNNING")
    slurm.wait_records("prolog_slurmd", job_id)

    slurm.run("scontrol", "requeue", job_id)
    # Pending for AuthInfo's cred_expire (10 s here, 120 s by default), then running again.
    again = wait_until(
        lambda: (j := slurm.job(job_id)) and j["job_state"] == "RUNNING" and j["restart_cnt"] and j,
        "the requeued job to run again",
        timeout=120,
    )
    assert again["restart_cnt"] == 1
    assert again["start_time"] > first["start_time"]

    node = first["nodes"]
    ended = slurm.wait_records("epilog_slurmd", job_id)[node]
    # The first run's epilog already sees the raised restart count.
    assert ended["SLURM_JOB_RESTART_COUNT"] == "1"
    prolog = slurm.wait_records("prolog_slurmd", job_id, run=1)[again["nodes"]]
    assert prolog["SLURM_JOB_RESTART_COUNT"] == "1"
    assert indices(prolog["SLURM_JOB_GPUS"]) == idx_of(again["gres_detail"][0])


def test_prolog_and_epilog_environment(slurm: SlurmCluster) -> None:
    job_id = slurm.sbatch(
        "--gres=gpu:2", "-A", "physics", "-J", "trainer", user="nobody", wrap="sleep 1"
    )
    job = slurm.wait_job(job_id, "COMPLETED")
    node = job["nodes"]
    assert job["user_name"] == "nobody"

    prolog = slurm.wait_records("prolog_slurmd", job_id)[node]
    expected = {
        "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
        "SLURM_JOB_ID": job_id,
        "SLURM_JOB_USER": "nobody",
        "SLURM_JOB_UID": "65534",
        "SLURM_JOB_ACCOUNT": "physics",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_CLUSTER_NAME": "testlab",
        "SLURMD_NODENAME": node,
        "SLURM_JOB_RESTART_COUNT": "0",
    }
    assert {k: prolog.get(k) for k in expected} == expected
    assert len(indices(prolog["SLURM_JOB_GPUS"])) == 2
    assert prolog["CUDA_VISIBLE_DEVICES"] == prolog["SLURM_JOB_GPUS"]

    epilog = slurm.wait_records("epilog_slurmd", job_id)[node]
    assert epilog["SLURM_SCRIPT_CONTEXT"] == "epilog_slurmd"
    assert epilog["SLURM_JOB_GPUS"] == prolog["SLURM_JOB_GPUS"]
    assert epilog["SLURM_JOB_EXIT_CODE"] == "0"

    controller = slurm.wait_records("prolog_slurmctld", job_id)["controller"]
    assert controller["SLURM_JOB_NAME"] == "trainer"
    assert controller["SLURM_JOB_NODELIST"] == node
    assert "SLURM_JOB_GPUS" not in controller  # the controller's scripts get no GPU indices


def test_a_test_hook_runs_in_the_prolog(slurm: SlurmCluster, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    script = f'#!/bin/sh\necho "$SLURM_JOB_ID $SLURM_JOB_GPUS" >> {seen}\n'
    with slurm.hook("prolog_slurmd", script):
        job_id = slurm.sbatch("--gres=gpu:1", wrap="true")
        job = slurm.wait_job(job_id, "COMPLETED")
    assert seen.read_text().split() == [
        job_id,
        slurm.records("prolog_slurmd", job_id)[job["nodes"]]["SLURM_JOB_GPUS"],
    ]


def test_a_job_process_names_its_job_in_its_cgroup(slurm: SlurmCluster) -> None:
    if not slurm.cgroup:
        pytest.skip(f"jobs run without cgroups here: {slurm.no_cgroup_reason}")
    job_id = slurm.sbatch("--gres=gpu:1", wrap=LONG)
    node = slurm.wait_job(job_id, "RUNNING")["nodes"]

    def pids() -> list[int]:
        out = slurm.run("scontrol", "listpids", job_id, check=False)
        return [int(line.split()[0]) for line in out.splitlines()[1:] if line.strip()]

    def cgroups() -> list[list[str]]:
        found = []
        for pid in pids():
            try:  # listpids may name a short-lived helper that is gone by now
                found.append(Path(f"/proc/{pid}/cgroup").read_text().splitlines())
            except FileNotFoundError:
                continue
        return found

    for lines in wait_until(cgroups, f"the cgroups of job {job_id}'s processes"):
        freezer = next(line for line in lines if ":freezer:" in line)
        assert freezer.endswith(f":/slurm_{node}/uid_0/job_{job_id}/step_batch"), lines


def test_inside_the_job_cuda_counts_from_zero_and_slurm_job_gpus_keeps_the_idx(
    slurm: SlurmCluster,
) -> None:
    """With ConstrainDevices the job's CUDA_VISIBLE_DEVICES is renumbered from 0; only
    SLURM_JOB_GPUS (and the prolog's variables) carry the node's IDX."""
    if not slurm.cgroup:
        pytest.skip(f"jobs run without cgroups here: {slurm.no_cgroup_reason}")
    slurm.sbatch("-w", "node1", "--gres=gpu:2", wrap=LONG)
    script = 'echo "cuda=$CUDA_VISIBLE_DEVICES gpus=$SLURM_JOB_GPUS"; sleep 300'
    job_id = slurm.sbatch("-w", "node1", "--gres=gpu:1", wrap=script)
    job = slurm.wait_job(job_id, "RUNNING")
    [idx] = idx_of(job["gres_detail"][0])
    assert idx in (2, 3)  # the first job holds two of node1's four
    text = slurm.output(job_id, "gpus=")
    assert text.split() == ["cuda=0", f"gpus={idx}"]
    prolog = slurm.wait_records("prolog_slurmd", job_id)["node1"]
    assert prolog["CUDA_VISIBLE_DEVICES"] == prolog["SLURM_JOB_GPUS"] == str(idx)


def test_gres_indices_need_not_be_contiguous(slurm: SlurmCluster) -> None:
    held = [slurm.sbatch("-w", "node1", "--gres=gpu:1", wrap=LONG) for _ in range(3)]
    by_idx = {idx_of(slurm.wait_job(j, "RUNNING")["gres_detail"][0])[0]: j for j in held}
    assert sorted(by_idx) == [0, 1, 2]
    slurm.run("scancel", by_idx[1])
    slurm.wait_job(by_idx[1], "CANCELLED")
    job_id = slurm.sbatch("-w", "node1", "--gres=gpu:2", wrap=LONG)
    job = slurm.wait_job(job_id, "RUNNING")
    assert job["gres_detail"] == ["gpu:2(IDX:1,3)"]
    assert "GRES=gpu:2(IDX:1,3)" in slurm.show_job(job_id)
    prolog = slurm.wait_records("prolog_slurmd", job_id)["node1"]
    assert prolog["SLURM_JOB_GPUS"] == "1,3"
