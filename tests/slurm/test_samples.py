"""The samples in tests/slurm/data have the shape this Slurm gives now (same release):
the board's parser tests read them in place of a live cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.slurm.cluster import SlurmCluster

DATA = Path(__file__).resolve().parent / "data"


def env_names(path: Path) -> set[str]:
    return {line.split("=", 1)[0] for line in path.read_text().splitlines() if "=" in line}


def test_the_samples_have_the_live_shape(slurm: SlurmCluster) -> None:
    sample = json.loads((DATA / "squeue.json").read_text())
    job_id = slurm.sbatch("--gres=gpu:2", "-A", "physics", wrap="sleep 300")
    slurm.wait_job(job_id, "RUNNING")
    live = slurm.squeue_json()
    release = live["meta"]["Slurm"]["release"]
    if release != sample["meta"]["Slurm"]["release"]:
        pytest.skip(
            f"the samples come from Slurm {sample['meta']['Slurm']['release']}, this is "
            f"{release}: python -m tests.slurm.capture_samples writes them anew"
        )
    assert live.keys() == sample.keys()
    [live_job] = [j for j in live["jobs"] if j["job_id"] == int(job_id)]
    running = next(j for j in sample["jobs"] if j["job_state"] == "RUNNING")
    assert sorted(live_job) == sorted(running)

    node = live_job["nodes"]
    prolog = slurm.wait_records("prolog_slurmd", job_id)[node]
    assert set(prolog) - {"PWD"} == env_names(DATA / "prolog_slurmd-trainer.env")
