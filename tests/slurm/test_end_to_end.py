"""Issue 29 end to end: a real Slurm (tests/slurm/cluster.py, nodes node1 and node2 with
four GPUs each) runs real jobs; a live board (`gua-board serve`, a real database)
hears of them both ways, from the controller's bridge and from the nodes' Prolog and
Epilog, and gets observations of the nodes that name the jobs' real processes. The
board's jobs list and jobs report must say what the jobs were and what they did.

One cluster per session and one board per module; each test's jobs are its own (Slurm's
ids only grow), and each test leaves every run closed on the board (the bridge after
the last job ended) and every host's last observation a heartbeat, so no test's figures
reach into another's.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.cluster import SlurmCluster, wait_until
from tests.slurm.site import (
    BUSY_UTIL,
    HOLD,
    HOLD_HOURS,
    IDLE_UTIL,
    Site,
    gpu_uuid,
    job_pids,
)
from tests.slurm.test_cluster import idx_of
from tests.support.databases import cloned_database
from tests.support.live import start_board, stop_board

LONG = "sleep 300"


@pytest.fixture(scope="module")
def site(
    slurm_cluster: SlurmCluster,
    pg_admin_url: str,
    template_db: str,
    worker_tag: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("slurm-site")
    root.chmod(0o755)  # the hooks (root, but from slurmd's folder) read the node configs
    with cloned_database(pg_admin_url, template_db, f"gua_t_{worker_tag}_slurm_e2e") as url:
        board = start_board(url, root / "board-data")
        try:
            yield Site.set_up(board, slurm_cluster, root)
        finally:
            stop_board(board)


@pytest.fixture
def lab(slurm: SlurmCluster, site: Site) -> Iterator[Site]:
    """The site for one test; after it, every job ended and the board told so."""
    yield site
    slurm.cancel_all()
    slurm.wait_no_jobs_running()
    site.bridge()


@contextmanager
def node_hooks(site: Site, gate: Path | None = None) -> Iterator[None]:
    """The nodes' Prolog and Epilog run `gua-agent job start|end` while inside."""
    with ExitStack() as hooks:
        hooks.enter_context(site.slurm.hook("prolog_slurmd", site.hook_script("start", gate)))
        hooks.enter_context(site.slurm.hook("epilog_slurmd", site.hook_script("end")))
        yield


@pytest.fixture
def hooked(lab: Site) -> Iterator[Site]:
    with node_hooks(lab):
        yield lab


def allocation(job: dict[str, Any]) -> dict[str, list[tuple[int, str]]]:
    """What squeue says a running job holds: node -> [(IDX, the GPU of that minor)]
    (the harness's gres.conf lists nvidia0-3 in order, so IDX is the minor)."""
    nodes = [n["nodename"] for n in job["job_resources"]["allocated_nodes"]]
    return {
        node: [(i, gpu_uuid(node, i)) for i in idx_of(detail)]
        for node, detail in zip(nodes, job["gres_detail"], strict=True)
    }


def one_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(runs) == 1, f"expected one run, the board lists {len(runs)}: {runs}"
    return runs[0]


def wait_past(moment: datetime) -> None:
    wait_until(lambda: datetime.now(UTC) > moment, f"the clock to pass {moment.isoformat()}")


def wait_to_end_after(moment: datetime) -> None:
    """Slurm's end_time (which the bridge sends) is in whole seconds, rounded down: a
    job ended after this waits has an end past `moment` by either path."""
    wait_past(moment.replace(microsecond=0) + timedelta(seconds=1))


def started(run: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(run["startedAt"])


# ---- the two record paths ----------------------------------------------------------------


def test_a_two_gpu_job_by_both_paths(slurm: SlurmCluster, hooked: Site) -> None:
    site = hooked
    go = slurm.work / "go-e2e-two-gpus"  # the session's work folder: a name of our own
    go.unlink(missing_ok=True)
    job_id = slurm.sbatch(
        "--gres=gpu:2", "-A", "physics", "-J", "trainer", user="nobody",
        wrap=f"while [ ! -e {go} ]; do sleep 0.2; done",
    )  # fmt: skip
    job = slurm.wait_job(job_id, "RUNNING")
    held = allocation(job)
    [node] = held
    assert len(held[node]) == 2

    # The node's prolog speaks first: the run, its devices matched to the node's GPUs.
    run = one_run(site.wait_runs("the prolog's record", lambda r: r, job_id))
    assert (run["jobId"], run["rawJobId"], run["restartCount"]) == (job_id, job_id, 0)
    assert (run["user"], run["account"], run["state"], run["endedAt"]) == (
        "nobody", "physics", "RUNNING", None,
    )  # fmt: skip
    assert run["name"] == ""  # a prolog does not know it
    assert site.devices(run) == held

    # Then the bridge: the same run, its name now known, nothing doubled.
    site.bridge()
    run = one_run(site.runs(job_id))
    assert (run["jobId"], run["name"], run["state"]) == (job_id, "trainer", "RUNNING")
    assert site.devices(run) == held
    assert abs(started(run).timestamp() - job["start_time"]) < 60

    # It ends: the epilog, then the bridge; one ended run, its devices kept. Slurm's
    # times are whole seconds, so it ends a second past its start to be told apart.
    wait_to_end_after(started(run))
    go.touch()
    slurm.wait_job(job_id, "COMPLETED")
    site.wait_runs("the epilog's record", lambda r: r[0]["endedAt"] is not None, job_id)
    site.bridge()
    run = one_run(site.runs(job_id))
    assert run["state"] == "COMPLETED"
    assert run["name"] == "trainer"
    assert started(run) < datetime.fromisoformat(run["endedAt"])
    assert site.devices(run) == held
    assert not site.unsent()


@pytest.mark.parametrize("first", ["bridge", "prologs"])
def test_an_array_job(slurm: SlurmCluster, lab: Site, first: str) -> None:
    """The bridge names the tasks `A_0`…; the nodes' prologs and epilogs name them by
    their raw ids only: one run per task, never two, keeping the bridge's ids, whichever
    spoke first (the prologs held back until the bridge did, or the bridge run after)."""
    site = lab
    gate = slurm.work / f"hold-prologs-{first}"
    if first == "bridge":
        gate.touch()
    with node_hooks(site, gate):
        array_id = slurm.sbatch("--array=0-2", "--gres=gpu:1", user="nobody", wrap=LONG)
        tasks = wait_until(
            lambda: (
                (t := slurm.array_tasks(array_id))
                and len(t) == 3
                and all(x["gres_detail"] for x in t)
                and t
            ),
            "the three array tasks to be allocated",
        )
        raw_ids = [str(t["job_id"]) for t in tasks]
        display_ids = {str(t["job_id"]): f"{array_id}_{t['array_task_id']}" for t in tasks}
        if first == "bridge":
            site.bridge()
            runs = site.runs(*raw_ids)
            assert {r["rawJobId"]: r["jobId"] for r in runs} == display_ids
            assert not any(site.hooks_done("start", r) for r in raw_ids)  # none spoke yet
            gate.unlink()
        wait_until(
            lambda: all(site.hooks_done("start", r) for r in raw_ids),
            "the three prologs to have run the agent",
        )
        assert not site.unsent()
        if first == "prologs":
            runs = site.runs(*raw_ids)
            assert {r["rawJobId"]: r["jobId"] for r in runs} == {r: r for r in raw_ids}
            site.bridge()
        for task in tasks:
            slurm.wait_job(task["job_id"], "RUNNING")
        runs = site.runs(*raw_ids)
        assert {r["rawJobId"]: r["jobId"] for r in runs} == display_ids
        for task in slurm.array_tasks(array_id):
            [run] = [r for r in runs if r["rawJobId"] == str(task["job_id"])]
            assert (run["restartCount"], run["state"], run["endedAt"]) == (0, "RUNNING", None)
            assert site.devices(run) == allocation(task)

        # Their epilogs (raw ids again) and the bridge close the same three runs.
        slurm.run("scancel", array_id)
        for task in tasks:
            slurm.wait_job(task["job_id"], "CANCELLED")
        wait_until(lambda: all(site.hooks_done("end", r) for r in raw_ids), "the three epilogs")
        assert not site.unsent()
        site.bridge()
    runs = site.runs(*raw_ids)
    assert {r["rawJobId"]: r["jobId"] for r in runs} == display_ids
    assert all(r["endedAt"] is not None and r["state"] == "CANCELLED" for r in runs), runs
    for task in tasks:
        [run] = [r for r in runs if r["rawJobId"] == str(task["job_id"])]
        assert site.devices(run) == allocation(task)


def test_a_requeued_job_is_two_runs_by_both_paths(slurm: SlurmCluster, hooked: Site) -> None:
    site = hooked
    job_id = slurm.sbatch("--gres=gpu:1", user="nobody", wrap=LONG)
    first = slurm.wait_job(job_id, "RUNNING")
    site.wait_runs("the first run's prolog record", lambda r: r, job_id)
    site.bridge()
    run0 = one_run(site.runs(job_id))
    assert (run0["restartCount"], run0["endedAt"]) == (0, None)
    assert site.devices(run0) == allocation(first)

    slurm.run("scontrol", "requeue", job_id)
    # Pending for cred_expire (10 s here), then a second run under the same id.
    again = wait_until(
        lambda: (
            (j := slurm.job(job_id)) and j["restart_cnt"] == 1 and j["job_state"] == "RUNNING" and j
        ),
        "the requeued job to run again",
        timeout=180,
    )
    runs = site.wait_runs(
        "the second run's prolog record", lambda r: len(r) == 2 and r[0]["endedAt"], job_id
    )
    site.bridge()
    runs = site.runs(job_id)
    assert [(r["restartCount"], r["jobId"]) for r in runs] == [(0, job_id), (1, job_id)]
    ended, running = runs
    assert ended["endedAt"] is not None
    assert ended["startedAt"] == run0["startedAt"]
    assert started(ended) <= datetime.fromisoformat(ended["endedAt"]) <= started(running)
    assert (running["state"], running["endedAt"]) == ("RUNNING", None)
    assert site.devices(ended) == allocation(first)
    assert site.devices(running) == allocation(again)


# ---- what the jobs' processes did --------------------------------------------------------


def test_a_job_on_two_nodes_and_what_its_processes_did(slurm: SlurmCluster, hooked: Site) -> None:
    """A job on node1 and node2 (two GPUs each): on node1 one of its processes computes
    on one GPU and another idles on the other; on node2 one GPU has nothing, the other
    only a process of another user. Each GPU's hour counts as the report says."""
    site = hooked
    # Two processes on each node: the batch step's, and one step's task per node.
    script = "srun -N2 --ntasks-per-node=1 sleep 300 & sleep 300 & wait"
    job_id = slurm.sbatch("-N", "2", "--gres=gpu:2", user="nobody", wrap=script)
    job = slurm.wait_job(job_id, "RUNNING")
    held = allocation(job)
    assert sorted(held) == ["node1", "node2"]
    assert all(len(gpus) == 2 for gpus in held.values())

    prolog = site.wait_runs(
        "both nodes' prolog records", lambda r: len(r[0]["allocations"]) == 2, job_id
    )
    assert site.devices(one_run(prolog)) == held
    site.bridge()
    run = one_run(site.runs(job_id))
    assert site.devices(run) == held

    wait_until(lambda: len(job_pids(slurm, job_id, "node1")) >= 2, "two sleeps on node1")
    node1_pids = job_pids(slurm, job_id, "node1")
    busy, idle = held["node1"][0][0], held["node1"][1][0]
    empty, shared = held["node2"][0][0], held["node2"][1][0]
    for pid in node1_pids[:2]:
        assert site.process(pid).linux_user == "nobody"
        if slurm.cgroup:
            assert site.process(pid).job_id == job_id
    outsider = subprocess.Popen(["sleep", "300"])  # root's, beside the job
    try:
        assert site.process(outsider.pid).linux_user == "root"
        # Observed from after both records' starts, for HOLD, then not at all.
        t1 = max(
            [started(r) for r in prolog + [run]] + [n.last_observed for n in site.nodes.values()]
        ) + timedelta(milliseconds=1)
        wait_past(t1 + HOLD)
        site.observe(
            "node1", {busy: (BUSY_UTIL, node1_pids[:1]), idle: (IDLE_UTIL, node1_pids[1:2])}, t1
        )
        site.observe("node2", {shared: (BUSY_UTIL, [outsider.pid])}, t1)

        # Now, per GPU, as the hosts API shows it.
        standings = site.gpu_standings()
        assert standings[gpu_uuid("node1", busy)] == (job_id, "active")
        assert standings[gpu_uuid("node1", idle)] == (job_id, "idle_held")
        assert standings[gpu_uuid("node2", empty)] == (job_id, "unused")
        assert standings[gpu_uuid("node2", shared)] == (job_id, "foreign")

        for node in ("node1", "node2"):
            site.heartbeat(node, t1 + HOLD)
    finally:
        outsider.kill()
        outsider.wait()

    expected = {
        "allocatedGpuHours": None,  # while it runs: until now, checked below
        "coveredGpuHours": 4 * HOLD_HOURS,
        "activeGpuHours": HOLD_HOURS,
        "idleHeldGpuHours": HOLD_HOURS,
        "foreignGpuHours": HOLD_HOURS,
        "unusedGpuHours": HOLD_HOURS,
        "wastedGpuHours": 2 * HOLD_HOURS,
        "efficiency": 0.25,
        "avgUtilPct": (BUSY_UTIL + IDLE_UTIL + BUSY_UTIL + IDLE_UTIL) / 4,
    }
    [row] = site.report_rows(job_id)
    assert row["user"] == "nobody"
    for key, value in expected.items():
        if value is not None:
            assert row[key] == pytest.approx(value), (key, row)
    assert row["wastedGpuHours"] == pytest.approx(row["idleHeldGpuHours"] + row["unusedGpuHours"])
    assert row["allocatedGpuHours"] >= row["coveredGpuHours"]

    # Its end (epilogs, bridge) changes none of it: the observed time was inside the job.
    wait_to_end_after(t1 + HOLD)
    slurm.run("scancel", job_id)
    slurm.wait_job(job_id, "CANCELLED")
    wait_until(lambda: site.hooks_done("end", job_id) == 2, "both nodes' epilogs")
    assert not site.unsent()
    site.bridge()
    run = one_run(site.runs(job_id))
    assert site.devices(run) == held
    [row] = site.report_rows(job_id)
    for key, value in expected.items():
        if value is not None:
            assert row[key] == pytest.approx(value), (key, row)


def test_a_job_running_before_the_integration_is_installed(
    slurm: SlurmCluster, lab: Site, tmp_path: Path
) -> None:
    """Observations of a job's GPUs are stored before the board knows the job; the
    bridge's first poll (a newly installed bridge) sees it mid-run and the job's figures
    come from the observations already stored. The nodes' hooks installed later end it."""
    site = lab
    job_id = slurm.sbatch("--gres=gpu:2", "-J", "early", user="nobody", wrap=LONG)
    job = slurm.wait_job(job_id, "RUNNING")
    held = allocation(job)
    [(node, gpus)] = held.items()
    busy, idle = gpus[0][0], gpus[1][0]
    pids = job_pids(slurm, job_id, node, comm="sleep")
    start = datetime.fromtimestamp(job["start_time"], UTC)
    t1 = max([start] + [n.last_observed for n in site.nodes.values()]) + timedelta(seconds=1)
    wait_past(t1 + HOLD)
    site.observe(node, {busy: (BUSY_UTIL, pids), idle: (IDLE_UTIL, pids)}, t1)
    site.heartbeat(node, t1 + HOLD)
    assert site.runs(job_id) == []
    assert site.report_rows(job_id) == []

    site.bridge(tmp_path / "new-bridge")  # first poll of a bridge installed just now
    run = one_run(site.runs(job_id))
    assert (run["jobId"], run["name"], run["state"]) == (job_id, "early", "RUNNING")
    assert started(run) == start
    assert site.devices(run) == held
    [row] = site.report_rows(job_id)
    assert row["coveredGpuHours"] == pytest.approx(2 * HOLD_HOURS)
    assert row["activeGpuHours"] == pytest.approx(HOLD_HOURS)
    assert row["idleHeldGpuHours"] == pytest.approx(HOLD_HOURS)
    assert row["wastedGpuHours"] == pytest.approx(HOLD_HOURS)
    assert (row["foreignGpuHours"], row["unusedGpuHours"]) == (0, 0)

    # The nodes' hooks, installed now, see only its end: the epilog has no prolog of it.
    wait_to_end_after(t1 + HOLD)
    with node_hooks(site):
        slurm.run("scancel", job_id)
        slurm.wait_job(job_id, "CANCELLED")
        wait_until(lambda: site.hooks_done("end", job_id), "the epilog")
        assert not site.unsent()
        run = one_run(site.runs(job_id))
        assert run["endedAt"] is not None  # the epilog's end, its start asked of scontrol
        assert started(run) == start
    site.bridge()
    run = one_run(site.runs(job_id))
    assert run["state"] == "CANCELLED"
    assert started(run) == start
    assert site.devices(run) == held
    [row] = site.report_rows(job_id)
    assert row["activeGpuHours"] == pytest.approx(HOLD_HOURS)
    assert row["idleHeldGpuHours"] == pytest.approx(HOLD_HOURS)


def test_the_hosts_are_named_like_the_nodes(lab: Site) -> None:
    """Enrolled with the machine's hostname; their first observation named them node1
    and node2, which is what the bridge's allocations are matched against."""
    hosts = {h["hostId"]: h for h in lab.get("/hosts")["hosts"]}
    for name, node in lab.nodes.items():
        assert hosts[node.host_id]["hostname"] == name
