"""A real Slurm cluster on this machine for the tests: munged, one slurmctld, N slurmd.

Debian's slurm-wlm (22.05) and munge, run as root from a temporary root (config.py):
our own MUNGE key and socket, free ports, GPUs declared as GRES backed by character
devices (major 195, the NVIDIA major) the harness creates. Debian builds Slurm with
--enable-multiple-slurmd, so several nodes run on one machine (`slurmd -N name`), which
is how the tests get jobs that span nodes.

`start()` raises SlurmUnavailable with the reason when Slurm cannot run here (not root,
not installed, a daemon that will not come up); the fixture turns that into a skip, or a
failure in CI.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.slurm import config
from tests.slurm.config import Layout, Node
from tests.support.ports import free_port

BINARIES = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")
INSTALL = "apt-get install -y slurmctld slurmd slurm-client munge (or run .ci/slurm-setup.sh)"
START_DEADLINE_S = 120.0


class SlurmUnavailable(Exception):
    """Slurm cannot run on this machine; the message says why."""


def cgroup_v1_available() -> bool:
    """The freezer and devices controllers mounted as cgroup v1, writable by us."""
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    v1 = {Path(f[1]).name for f in (m.split() for m in mounts) if len(f) > 3 and f[2] == "cgroup"}
    return all(
        c in v1 and os.access(f"/sys/fs/cgroup/{c}", os.W_OK) for c in ("freezer", "devices")
    )


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll `check` until it returns something truthy; AssertionError naming `what` if not."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


class SlurmCluster:
    def __init__(
        self,
        *,
        cluster_name: str = "testlab",
        node_names: tuple[str, ...] = ("node1", "node2"),
        gpu_minors: tuple[int, ...] = (0, 1, 2, 3),
        cpus_per_node: int = 8,
        cgroup: str | None = "auto",
        prolog_flags: str = "Alloc",
        pci_order: tuple[int, ...] | None = None,
    ) -> None:
        """`gpu_minors`: the device files gres.conf lists, in that order. `pci_order`:
        instead of gres.conf's File=, GPUs found as AutoDetect=nvml finds them (Slurm's
        fake_gpus.conf), NVML enumerating these minors in this order."""
        if pci_order is not None:
            gpu_minors = tuple(sorted(pci_order))
        self._options = (cluster_name, node_names, gpu_minors, cpus_per_node, prolog_flags)
        self._pci_order = pci_order
        self._cgroup = cgroup
        self.layout: Layout | None = None
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.devices_are_char = False  # mknod worked: ConstrainDevices can be observed
        self.started_in_s = 0.0
        self.cgroup_tried = False  # this start used cgroup v1 (the fixture retries without)
        self.no_cgroup_reason = ""  # why the jobs run without cgroups, where they do

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> SlurmCluster:
        if os.geteuid() != 0:
            raise SlurmUnavailable("the Slurm tests run slurmd, which needs root")
        missing = [b for b in BINARIES if shutil.which(b) is None]
        if missing:
            raise SlurmUnavailable(f"{', '.join(missing)} not found: {INSTALL}")
        began = time.monotonic()
        self.layout = self._write_layout()
        try:
            self._start_munged()
            self._start_daemon("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
            wait_until(self._controller_up, "slurmctld to answer", START_DEADLINE_S)
            for node in self.layout.nodes:
                argv = ["slurmd", "-D", "-N", node.name, "-f", str(self.conf)]
                self._start_daemon(f"slurmd-{node.name}", argv)
            self.wait_idle(START_DEADLINE_S)
        except (AssertionError, OSError) as error:
            reason = f"{error}\n{self.log_tail()}"
            self.stop()
            raise SlurmUnavailable(f"Slurm did not start: {reason}") from error
        self.started_in_s = time.monotonic() - began
        return self

    def stop(self) -> None:
        if self.layout is None:
            return
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            try:
                self.cancel_all()
                self.wait_no_jobs_running(60)
            except AssertionError:
                pass  # stopped all the same; slurmd kills its steps on the way down
        for name in reversed(list(self.processes)):
            self._stop_process(name)
        self.processes.clear()
        self._remove_cgroups()
        if os.environ.get("GUA_SLURM_KEEP") != "1":
            shutil.rmtree(self.layout.root, ignore_errors=True)
        self.layout = None

    # ---- commands ----------------------------------------------------------------------

    @property
    def conf(self) -> Path:
        assert self.layout is not None, "the cluster is not started"
        return self.layout.slurm_conf

    @property
    def nodes(self) -> tuple[Node, ...]:
        assert self.layout is not None
        return self.layout.nodes

    @property
    def work(self) -> Path:
        assert self.layout is not None
        return self.layout.work

    @property
    def cgroup(self) -> str | None:
        assert self.layout is not None
        return self.layout.cgroup

    def env(self) -> dict[str, str]:
        """The environment for Slurm's commands: our slurm.conf, no outer job's SLURM_*."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> str:
        env, cwd = self.env(), self.work
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
        return done.stdout

    def sbatch(self, *args: str, wrap: str | None = None, user: str | None = None) -> str:
        """Submit from the work folder; the job id (the array's job id for an array)."""
        argv = ["sbatch", "--parsable", f"--chdir={self.work}", *args]
        if user is not None:
            argv.append(f"--uid={user}")
        if wrap is not None:
            argv.append(f"--wrap={wrap}")
        return self.run(*argv).strip().split(";")[0]

    def output(self, job: str, marker: str, timeout: float = 60) -> str:
        """The job's slurm-<job>.out (`job`: "4711", or "4700_2" for an array task) once
        it holds `marker`."""
        path = self.work / f"slurm-{job}.out"

        def written() -> str:
            text = path.read_text() if path.exists() else ""
            return text if marker in text else ""

        found: str = wait_until(written, f"{path.name} to show {marker!r}", timeout)
        return found

    def squeue_json(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.run("squeue", "--json"))
        return parsed

    def jobs(self) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = self.squeue_json()["jobs"]
        return jobs

    def job(self, job_id: str | int) -> dict[str, Any] | None:
        """squeue --json's record of one job by its own id (an array task's raw id too)."""
        return next((j for j in self.jobs() if j["job_id"] == int(job_id)), None)

    def array_tasks(self, array_job_id: str | int) -> list[dict[str, Any]]:
        tasks = [j for j in self.jobs() if j["array_job_id"] == int(array_job_id)]
        return sorted(tasks, key=lambda j: j["array_task_id"])

    def show_job(self, job_id: str | int) -> str:
        return self.run("scontrol", "show", "job", "-d", str(job_id))

    def wait_job(self, job_id: str | int, *states: str, timeout: float = 60) -> dict[str, Any]:
        """Wait until the job is in one of `states` (squeue's job_state)."""

        def in_state() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job is not None and job["job_state"] in states else None

        found: dict[str, Any] = wait_until(in_state, f"job {job_id} to be {states}", timeout)
        return found

    def cancel_all(self) -> None:
        self.run("scancel", "--partition=gpu", check=False)

    def wait_no_jobs_running(self, timeout: float = 60) -> None:
        live = {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "PENDING", "REQUEUED"}
        wait_until(
            lambda: not any(j["job_state"] in live for j in self.jobs()),
            "every job to end",
            timeout,
        )

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T")
        return dict(line.split() for line in out.splitlines() if line.strip())

    def wait_idle(self, timeout: float = 60) -> None:
        """Every node idle (not allocated, not drained, not down)."""
        assert self.layout is not None
        names = {n.name for n in self.layout.nodes}

        def idle() -> bool:
            self._check_alive()
            states = self.node_states()
            return set(states) == names and all(s == "idle" for s in states.values())

        wait_until(idle, "every node to be idle", timeout)

    def reset(self) -> None:
        """Between tests: no jobs, no hooks, every node idle (a drained one resumed)."""
        assert self.layout is not None
        self.cancel_all()
        self.wait_no_jobs_running()
        for context in config.CONTEXTS:
            for hook in (self.layout.hooks / context).glob("*"):
                hook.unlink()
        for node, state in self.node_states().items():
            if state.startswith(("drain", "down")):
                self.run("scontrol", "update", f"nodename={node}", "state=resume")
        self.wait_idle()

    # ---- prolog / epilog -----------------------------------------------------------------

    @contextmanager
    def hook(self, context: str, script: str, name: str = "50-test") -> Iterator[Path]:
        """Run `script` (a full executable text, #! line included) in `context`
        (prolog_slurmd, epilog_slurmd, prolog_slurmctld, epilog_slurmctld) while inside."""
        assert self.layout is not None
        assert context in config.CONTEXTS, f"{context} is none of {config.CONTEXTS}"
        path = self.layout.hooks / context / name
        staged = path.with_name(f".{name}")
        staged.write_text(script)
        staged.chmod(0o755)
        staged.rename(path)  # whole, never half-written, when slurmd runs it
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)

    def records(self, context: str, job_id: str | int, run: int = 0) -> dict[str, dict[str, str]]:
        """The environment a prolog or epilog got, by node ("controller" for the
        slurmctld ones); `run` counts that job's runs on the node (1 after a requeue)."""
        assert self.layout is not None
        found: dict[str, dict[str, str]] = {}
        for path in (self.layout.records / context).glob(f"{job_id}@*.{run}.env"):
            pairs = (item.split("=", 1) for item in path.read_text().split("\0") if "=" in item)
            found[path.name.split("@", 1)[1].rsplit(".", 2)[0]] = dict(pairs)
        return found

    def wait_records(
        self, context: str, job_id: str | int, nodes: int = 1, run: int = 0, timeout: float = 60
    ) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = wait_until(
            lambda: (r := self.records(context, job_id, run)) and len(r) >= nodes and r,
            f"{context} records of job {job_id} (run {run}) from {nodes} node(s)",
            timeout,
        )
        return found

    # ---- internals ------------------------------------------------------------------------

    def _write_layout(self) -> Layout:
        cluster_name, node_names, minors, cpus, prolog_flags = self._options
        root = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
        root.chmod(0o755)  # munged wants every folder above its socket searchable by all
        cgroup = self._cgroup
        if cgroup == "auto":
            cgroup = "v1" if cgroup_v1_available() else None
            if cgroup is None:
                self.no_cgroup_reason = "no writable cgroup v1 freezer and devices controllers"
        self.cgroup_tried = cgroup is not None
        layout = Layout(
            root=root,
            cluster_name=cluster_name,
            hostname=socket.gethostname().split(".")[0],
            controller_port=free_port(),
            nodes=tuple(Node(n, free_port(), minors) for n in node_names),
            cpus_per_node=cpus,
            # Far apart per cluster: two clusters on one machine share the cgroup tree.
            first_job_id=random.randrange(1, 900) * 1000,
            cgroup=cgroup,
            prolog_flags=prolog_flags,
            pci_order=self._pci_order,
        )
        self.devices_are_char = config.write_files(layout)
        return layout

    def _start_munged(self) -> None:
        assert self.layout is not None
        m, run = self.layout.munge_dir, self.layout.run
        argv = [
            "munged", "--foreground", f"--socket={self.layout.munge_socket}",
            f"--key-file={m / 'munge.key'}", f"--pid-file={run / 'munged.pid'}",
            f"--log-file={self.layout.log / 'munged.log'}", f"--seed-file={m / 'munged.seed'}",
        ]  # fmt: skip
        self._start_daemon("munged", argv)

        def answers() -> bool:
            self._check_alive()
            probe = subprocess.run(
                ["munge", "-n", f"--socket={self.layout.munge_socket}"],  # type: ignore[union-attr]
                capture_output=True,
            )
            return probe.returncode == 0

        wait_until(answers, "munged to answer", START_DEADLINE_S)

    def _start_daemon(self, name: str, argv: list[str]) -> None:
        assert self.layout is not None
        out = (self.layout.log / f"{name}.out").open("wb")
        self.processes[name] = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=self.env(),
            cwd=self.layout.log,
            start_new_session=True,
        )
        out.close()

    def _check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise AssertionError(f"{name} exited with status {process.returncode}")

    def _controller_up(self) -> bool:
        self._check_alive()
        ping = subprocess.run(["scontrol", "ping"], env=self.env(), capture_output=True, text=True)
        return "is UP" in ping.stdout

    def _stop_process(self, name: str) -> None:
        process = self.processes[name]
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)

    def _remove_cgroups(self) -> None:
        """Slurm leaves its per-node cgroup folders (slurm_<node>) behind; empty ones go."""
        assert self.layout is not None
        if not self.layout.cgroup:
            return
        for node in self.layout.nodes:
            for top in Path("/sys/fs/cgroup").glob(f"*/slurm_{node.name}"):
                for folder in sorted(top.glob("**/"), key=lambda p: len(p.parts), reverse=True):
                    try:
                        folder.rmdir()
                    except OSError:
                        pass  # still in use (another cluster's job), or not ours to remove

    def log_tail(self, lines: int = 15) -> str:
        if self.layout is None or not self.layout.log.exists():
            return ""
        parts = []
        for log in sorted(self.layout.log.iterdir()):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            if text:
                parts.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(parts)
