"""The files a test Slurm cluster runs from: slurm.conf, gres.conf, cgroup.conf, the hook.

Everything lives under one temporary root, so a cluster needs nothing of the machine's
/etc/slurm, /etc/munge or /run/munge, and two clusters (two xdist workers) can run side
by side: their ports are free ports and their job ids start far apart (`first_job_id`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The four places Slurm runs a prolog or epilog, as SLURM_SCRIPT_CONTEXT names them.
CONTEXTS = ("prolog_slurmd", "epilog_slurmd", "prolog_slurmctld", "epilog_slurmctld")


@dataclass(frozen=True)
class Node:
    """One slurmd: its NodeName, its port, and the minor numbers of its GPU device files."""

    name: str
    port: int
    gpu_minors: tuple[int, ...]


@dataclass(frozen=True)
class Layout:
    root: Path
    cluster_name: str
    hostname: str  # this machine's short name: slurmctld and slurmd check it
    controller_port: int
    nodes: tuple[Node, ...]
    cpus_per_node: int
    first_job_id: int
    # "v1": proctrack/cgroup + task/cgroup (devices constrained); None: linuxproc, task/none.
    cgroup: str | None
    prolog_flags: str = "Alloc"
    cred_expire_s: int = 10

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def munge_socket(self) -> Path:
        return self.run / "munge.socket"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def records(self) -> Path:
        return self.root / "records"

    @property
    def hooks(self) -> Path:
        return self.root / "hooks"

    @property
    def hook_script(layout: Layout) -> str:
    """Prolog, Epilog, PrologSlurmctld and EpilogSlurmctld in one: record the environment
    Slurm gives (NUL-separated, written whole), then run the tests' hooks for the context.
    Records are numbered per job and node in the order they ran (<job>@<node>.<n>.env):
    not by SLURM_JOB_RESTART_COUNT, which an epilog of a requeued run already sees raised.
    A hook that fails fails the prolog, as a site's would (Slurm drains the node)."""
    return f"""\
#!/bin/sh
context="${{SLURM_SCRIPT_CONTEXT:-unknown}}"
stem="$SLURM_JOB_ID@${{SLURMD_NODENAME:-controller}}"
dir="{layout.records}/$context"
mkdir -p "$dir"
n=$(find "$dir" -maxdepth 1 -name "$stem.*.env" | wc -l)
env -0 > "$dir/.$stem.$$" && mv "$dir/.$stem.$$" "$dir/$stem.$n.env"
for hook in "{layout.hooks}/$context"/*; do
  [ -x "$hook" ] || continue
  "$hook" || exit $?
done
exit 0
"""
