"""A live board (tests/support/live.py) whose workspace has the test Slurm cluster's
nodes as hosts, and the ways records and observations reach it, as at a real site:

- each node enrolled with our agent (`gua-agent enroll`, one config per node), its
  hostname the Slurm NodeName from its first observation's `host.hostname`;
- the controller's bridge, `gua-agent slurm-bridge --once`, with a scheduler member's
  token;
- the nodes' Prolog and Epilog running `gua-agent job start|end` with their own configs;
- observations built by the agent's own payload builder from real processes (user,
  name and job id read from /proc as the agent reads them), pushed to
  `/agent/v1/observations` with each node's agent token.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent import AGENT_VERSION
from agent.model import (
    ERROR_NVML_INIT_FAILED,
    Collection,
    GpuReading,
    ProcessReading,
    UsageState,
)
from agent.payload import HostIdentity, build_observation, encode_observation
from agent.procinfo import ProcInfo
from tests.slurm.cluster import SlurmCluster, wait_until
from tests.support.live import LiveBoard

REPO = Path(__file__).resolve().parents[2]
WORKSPACE = "lab"
# Past the agent's 5 % "not computing" line, and under it.
BUSY_UTIL, IDLE_UTIL = 90, 0
# How long each observation holds before the next: 3.6 s is 0.001 GPU-hours, exact in
# the report's six decimals.
HOLD = timedelta(seconds=3.6)
HOLD_HOURS = 0.001


def gpu_uuid(node: str, minor: int) -> str:
    return f"GPU-{node}-{minor}"


@dataclass
class NodeHost:
    """One Slurm node as the board's host: its agent config and what it last pushed."""

    name: str
    config: Path
    host_id: str  # the board's public id
    display_name: str
    agent_token: str
    minors: tuple[int, ...]
    last_observed: datetime


class Site:
    def __init__(
        self, board: LiveBoard, slurm: SlurmCluster, root: Path, admin: str, scheduler: str
    ) -> None:
        self.board, self.slurm, self.root = board, slurm, root
        self.admin, self.scheduler = admin, scheduler
        self.nodes: dict[str, NodeHost] = {}
        self.bridge_state = root / "bridge-state"
        self.done = root / "hooks-done"
        self.done.mkdir(exist_ok=True)
        self.proc = ProcInfo()
        assert slurm.layout is not None, "the cluster is not started"
        self.cluster = slurm.layout.cluster_name

    @classmethod
    def set_up(cls, board: LiveBoard, slurm: SlurmCluster, root: Path) -> Site:
        """The workspace, an admin, a scheduler member, and each node enrolled and seen once."""
        board.cli("create-workspace", WORKSPACE, "--name", "Lab")
        admin = board.cli_json(
            "create-user", f"admin@{WORKSPACE}.example", "--workspace", WORKSPACE, "--role", "admin"
        )["apiToken"]
        scheduler = board.cli_json(
            "create-user", "slurm@lab.example", "--workspace", WORKSPACE, "--role", "scheduler"
        )["apiToken"]
        site = cls(board, slurm, root, admin, scheduler)
        for node in slurm.nodes:
            site.enroll(node.name, node.gpu_minors)
        for name in site.nodes:
            site.observe(name, {})
            site.heartbeat(name)
        return site

    # ---- the agent's command line ------------------------------------------------------

    def agent(
        self, *args: str, stdin: str | None = None, env: Mapping[str, str] | None = None
    ) -> str:
        environment = self.slurm.env()
        environment.update(env or {})
        environment["PYTHONPATH"] = os.pathsep.join([str(REPO), environment.get("PYTHONPATH", "")])
        done = subprocess.run(
            [sys.executable, "-m", "agent", *args],
            env=environment,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"gua-agent {args[0]} exited {done.returncode}: {done.stderr}"
        leaked = self.board.leaks_in(done.stdout + done.stderr)
        assert not leaked, f"gua-agent {args[0]} wrote secrets {leaked}"
        return done.stdout

    def enroll(self, name: str, minors: tuple[int, ...]) -> None:
        issued = self.board.cli_json("issue-token", "--workspace", WORKSPACE)
        config = self.root / f"{name}.json"
        self.agent(
            "enroll", "--server-url", self.board.url, "--enrollment-token", "-",
            "--cluster", self.cluster,
            "--config", str(config),
            stdin=issued["enrollmentToken"] + "\n",
        )  # fmt: skip
        data = json.loads(config.read_text())
        self.board.remember(data["agentToken"])
        self.nodes[name] = NodeHost(
            name=name,
            config=config,
            host_id=data["hostId"],
            display_name=data["displayName"],
            agent_token=data["agentToken"],
            minors=minors,
            last_observed=datetime.now(UTC) - timedelta(minutes=10),
        )

    def bridge(self, state_dir: Path | None = None) -> None:
        """`gua-agent slurm-bridge --once` on the controller: every change posted."""
        self.agent(
            "slurm-bridge", "--once", "--server-url", self.board.url, "--workspace", WORKSPACE,
            "--state-dir", str(state_dir or self.bridge_state),
            env={"GUA_BRIDGE_TOKEN": self.scheduler},
        )  # fmt: skip

    def hook_script(self, action: str, gate: Path | None = None) -> str:
        """The node's Prolog (`start`) or Epilog (`end`): the agent with the node's own
        config and spool. `gate`: while that file exists, the hook waits (at most 2 min)
        before it runs, so the bridge can speak first."""
        python, repo = shlex.quote(sys.executable), shlex.quote(str(REPO))
        node = f'{shlex.quote(str(self.root))}/"$SLURMD_NODENAME"'
        wait = ""
        if gate is not None:
            g = shlex.quote(str(gate))
            wait = f"n=0; while [ -e {g} ] && [ $n -lt 600 ]; do sleep 0.2; n=$((n+1)); done\n"
        done = shlex.quote(str(self.done))
        return (
            "#!/bin/sh\n"
            + wait
            + f"env PYTHONPATH={repo} {python} -m agent job {action} --timeout 20s \\\n"
            f"  --config {node}.json --spool-dir {node}-spool || exit $?\n"
            f'touch {done}/{action}-"$SLURM_JOB_ID-$SLURMD_NODENAME-$$"\n'
        )

    def hooks_done(self, action: str, job_id: str | int) -> int:
        """How many times a node's hook ran `gua-agent job <action>` for the job (sent,
        or spooled where the board did not take it: see `unsent`)."""
        return len(list(self.done.glob(f"{action}-{job_id}-*")))

    def unsent(self) -> list[Path]:
        """Node records waiting in a spool (not accepted by the board)."""
        return list(self.root.glob("*-spool/jobs/*.json"))

    # ---- observations ------------------------------------------------------------------

    def process(self, pid: int) -> ProcessReading:
        """A compute process as our agent reads it from /proc."""
        p = self.proc
        return ProcessReading(pid, p.user(pid), p.name(pid), "compute", 512, p.job_id(pid))

    def observe(
        self,
        name: str,
        gpus: Mapping[int, tuple[int, Sequence[int]]],
        at: datetime | None = None,
    ) -> datetime:
        """Push one observation of the node: per minor (util %, pids of processes on it);
        a GPU not named is idle with nothing on it. Returns its time."""
        node = self.nodes[name]
        readings = []
        for index, minor in enumerate(node.minors):
            util, pids = gpus.get(minor, (IDLE_UTIL, ()))
            processes = tuple(self.process(pid) for pid in pids)
            state: UsageState = "idle" if not processes else "active" if util > 5 else "idle_held"
            readings.append(
                GpuReading(
                    index=index,
                    uuid=gpu_uuid(name, minor),
                    name="NVIDIA H100 80GB HBM3",
                    memory_total_mb=81559,
                    memory_used_mb=512 * len(processes),
                    util_pct=util,
                    temperature_c=40,
                    power_w=100,
                    processes=processes,
                    usage_state=state,
                    minor_number=minor,
                )
            )
        collection = Collection(driver_version="550.54.15", gpus=tuple(readings))
        return self._push(node, collection, at)

    def heartbeat(self, name: str, at: datetime | None = None) -> datetime:
        """An error heartbeat: the host is alive, its GPUs unread, so the time from the
        observation before it to the next counts for no job (the tests' figures are the
        intervals they push, never one reaching into the next test)."""
        return self._push(self.nodes[name], Collection.failed(ERROR_NVML_INIT_FAILED), at)

    def _push(self, node: NodeHost, collection: Collection, at: datetime | None) -> datetime:
        moment = at or max(datetime.now(UTC), node.last_observed + timedelta(milliseconds=1))
        assert moment > node.last_observed, "observations of a host go forward in time"
        identity = HostIdentity(
            node.name, AGENT_VERSION, node.host_id, node.display_name, self.cluster
        )
        body = encode_observation(build_observation(collection, identity, moment))
        with self.board.client(node.agent_token) as client:
            reply = self.board.call(
                client,
                "POST",
                "/agent/v1/observations",
                content=body,
                headers={"Content-Type": "application/json"},
            )
        assert reply.status_code == 202, reply
        node.last_observed = moment
        return moment

    # ---- what the board says -----------------------------------------------------------

    def get(self, path: str, **params: Any) -> Any:
        with self.board.client(self.admin) as client:
            reply = self.board.call(client, "GET", f"/api/v1/workspaces/{WORKSPACE}{path}",
                                    params=params)  # fmt: skip
        assert reply.status_code == 200, reply
        return json.loads(reply.text)

    def window(self) -> dict[str, str]:
        today = datetime.now(UTC).date()
        return {
            "from": (today - timedelta(days=1)).isoformat(),
            "to": (today + timedelta(days=2)).isoformat(),
        }

    def runs(self, *raw_ids: str | int) -> list[dict[str, Any]]:
        """The board's runs of these jobs (by Slurm's own ids), oldest start first."""
        wanted = {str(r) for r in raw_ids}
        jobs: list[dict[str, Any]] = self.get("/jobs", **self.window())["jobs"]
        return [j for j in jobs if j["rawJobId"] in wanted]

    def devices(self, run: Mapping[str, Any]) -> dict[str, list[tuple[int, str | None]]]:
        """A listed run's allocations: node name -> [(device, the GPU it matched)]."""
        names = {n.host_id: n.name for n in self.nodes.values()}
        return {
            names[a["hostId"]]: [(g["device"], g["gpuUuid"]) for g in a["gpus"]]
            for a in run["allocations"]
        }

    def wait_runs(self, what: str, check: Any, *raw_ids: str | int, timeout: float = 120) -> Any:
        """The runs of these jobs once `check(runs)` holds."""
        return wait_until(
            lambda: (runs := self.runs(*raw_ids)) and check(runs) and runs, what, timeout
        )

    def report_rows(self, job_id: str) -> list[dict[str, Any]]:
        report = self.get("/reports/jobs", groupBy="job", **self.window())
        return [r for r in report["rows"] if r["jobId"] == job_id]

    def gpu_standings(self) -> dict[str, tuple[str | None, str | None]]:
        """Every GPU's uuid -> (the job holding it now, its standing), per the hosts API."""
        found: dict[str, tuple[str | None, str | None]] = {}
        for host in self.get("/hosts")["hosts"]:
            for gpu in host["gpus"]:
                job = gpu.get("job")
                found[gpu["uuid"]] = (job["jobId"], job["standing"]) if job else (None, None)
        return found


def job_pids(slurm: SlurmCluster, job_id: str, node: str, comm: str = "sleep") -> list[int]:
    """The job's processes on `node` named `comm` (scontrol listpids, read from /proc)."""

    def found() -> list[int]:
        out = slurm.run("scontrol", "listpids", job_id, node, check=False)
        pids = []
        for line in out.splitlines()[1:]:
            parts = line.split()
            if not parts or not parts[0].isdigit():
                continue
            pid = int(parts[0])
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                    pids.append(pid)
            except OSError:
                continue
        return sorted(pids)

    pids: list[int] = wait_until(found, f"job {job_id}'s {comm} processes on {node}")
    return pids
