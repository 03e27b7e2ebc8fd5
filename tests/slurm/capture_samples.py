"""Write tests/slurm/data/: what a real Slurm says about a few jobs, for the board's
parser tests. Run as root on a machine with Slurm (.ci/slurm-setup.sh):

    PYTHONPATH=$PWD python -m tests.slurm.capture_samples

The jobs: `short` (ran and completed), `trainer` (user nobody, account physics, 3 GPUs
on node1), `wide` (2 nodes, 1 GPU each), `retry` (ran, then requeued: pending again with
restart count 1), and the array `sweep` (4 tasks of 1 GPU; one waits for a GPU).
The cluster's temporary folder is written as /srv/slurm so the files do not change
from run to run but for times and job ids.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.slurm.cluster import SlurmCluster, wait_until

DATA = Path(__file__).resolve().parent / "data"
STABLE_ROOT = "/srv/slurm"


def _stable(text: str, cluster: SlurmCluster) -> str:
    assert cluster.layout is not None
    return text.replace(str(cluster.layout.root), STABLE_ROOT)


def _env_text(env: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in sorted(env.items()) if k != "PWD")


def _submit(cluster: SlurmCluster) -> dict[str, str]:
    long = "sleep 600"
    ids = {"short": cluster.sbatch("-J", "short", "-A", "physics", "--gres=gpu:1", wrap="true")}
    cluster.wait_job(ids["short"], "COMPLETED")
    ids["trainer"] = cluster.sbatch(
        "-J", "trainer", "-A", "physics", "-w", "node1", "--gres=gpu:3", user="nobody", wrap=long
    )
    cluster.wait_job(ids["trainer"], "RUNNING")
    ids["wide"] = cluster.sbatch("-J", "wide", "-A", "vision", "-N", "2", "--gres=gpu:1", wrap=long)
    cluster.wait_job(ids["wide"], "RUNNING")
    ids["retry"] = cluster.sbatch("-J", "retry", "--gres=gpu:1", wrap=long)
    cluster.wait_job(ids["retry"], "RUNNING")
    cluster.run("scontrol", "requeue", ids["retry"])
    cluster.wait_job(ids["retry"], "PENDING")
    cluster.wait_records("epilog_slurmd", ids["retry"])
    script = f"cat /proc/self/cgroup; {long}"
    ids["sweep"] = cluster.sbatch(
        "-J", "sweep", "-A", "vision", "--array=0-3", "--gres=gpu:1", wrap=script
    )
    wait_until(
        lambda: sum(t["job_state"] == "RUNNING" for t in cluster.array_tasks(ids["sweep"])) == 3,
        "three of the four array tasks to run (the fourth waits for a GPU)",
    )
    return ids


def _squeue_sample(cluster: SlurmCluster) -> dict[str, Any]:
    data = json.loads(_stable(cluster.run("squeue", "--json"), cluster))
    data["jobs"].sort(key=lambda j: (j["array_job_id"] or j["job_id"], j["job_id"]))
    return dict(data)


def capture(cluster: SlurmCluster) -> None:
    ids = _submit(cluster)
    DATA.mkdir(exist_ok=True)
    squeue = _squeue_sample(cluster)
    (DATA / "squeue.json").write_text(json.dumps(squeue, indent=2) + "\n")
    (DATA / "scontrol-show-job-d.txt").write_text(
        _stable(cluster.run("scontrol", "show", "job", "-d"), cluster)
    )

    wide, sweep = ids["wide"], ids["sweep"]
    task = next(t for t in cluster.array_tasks(sweep) if t["job_id"] != int(sweep))
    node = task["nodes"]
    samples = {
        "prolog_slurmd-trainer.env": cluster.records("prolog_slurmd", ids["trainer"])["node1"],
        "prolog_slurmd-wide-node2.env": cluster.wait_records("prolog_slurmd", wide, 2)["node2"],
        "prolog_slurmd-array-task.env": cluster.wait_records("prolog_slurmd", task["job_id"])[node],
        "prolog_slurmctld-array-task.env": cluster.wait_records("prolog_slurmctld", task["job_id"])[
            "controller"
        ],
        "epilog_slurmd-completed.env": next(
            iter(cluster.records("epilog_slurmd", ids["short"]).values())
        ),
        "epilog_slurmd-requeued.env": next(
            iter(cluster.records("epilog_slurmd", ids["retry"]).values())
        ),
        "epilog_slurmctld-requeued.env": cluster.wait_records("epilog_slurmctld", ids["retry"])[
            "controller"
        ],
    }
    for name, env in samples.items():
        (DATA / name).write_text(_stable(_env_text(env), cluster))

    if cluster.cgroup:
        text = cluster.output(f"{sweep}_{task['array_task_id']}", "job_")
        (DATA / "proc-pid-cgroup-v1.txt").write_text(text)
    assert cluster.layout is not None
    jobcomp = (cluster.layout.root / "jobcomp.log").read_text()
    (DATA / "jobcomp-filetxt.log").write_text(_stable(jobcomp, cluster))


def main() -> int:
    cluster = SlurmCluster().start()
    try:
        capture(cluster)
    finally:
        cluster.stop()
    sys.stdout.write(f"wrote {DATA}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
