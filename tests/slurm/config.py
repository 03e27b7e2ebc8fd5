"""The files a test Slurm cluster runs from: slurm.conf, gres.conf, cgroup.conf, the hook.

Everything lives under one temporary root, so a cluster needs nothing of the machine's
/etc/slurm, /etc/munge or /run/munge, and two clusters (two xdist workers) can run side
by side: their ports are free ports and their job ids start far apart (`first_job_id`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

NVIDIA_MAJOR = 195
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
    # Emulate AutoDetect=nvml: the GPUs as NVML enumerates them (PCI bus order), by minor.
    pci_order: tuple[int, ...] | None = None

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
    def hook_script(self) -> Path:
        return self.root / "bin" / "hook"

    @property
    def work(self) -> Path:
        """The jobs' working folder (world-writable: jobs may run as another user)."""
        return self.root / "work"

    def device(self, node: Node, minor: int) -> Path:
        return self.root / "dev" / node.name / f"nvidia{minor}"


def slurm_conf(layout: Layout) -> str:
    root, hook = layout.root, layout.hook_script
    if layout.cgroup:
        tracking = "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup"
    else:
        tracking = "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none"
    nodes = "\n".join(
        f"NodeName={n.name} NodeHostname={layout.hostname} NodeAddr=127.0.0.1 "
        f"Port={n.port} CPUs={layout.cpus_per_node} RealMemory=1000 "
        f"Gres=gpu:{len(n.gpu_minors)} State=UNKNOWN"
        for n in layout.nodes
    )
    names = ",".join(n.name for n in layout.nodes)
    return f"""\
ClusterName={layout.cluster_name}
SlurmctldHost={layout.hostname}(127.0.0.1)
SlurmctldPort={layout.controller_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Our own munged; cred_expire also sets how long a requeued job waits before it may start.
AuthInfo=socket={layout.munge_socket},cred_expire={layout.cred_expire_s}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={layout.run}/slurmctld.pid
SlurmdPidFile={layout.run}/slurmd-%n.pid
SlurmctldLogFile={layout.log}/slurmctld.log
SlurmdLogFile={layout.log}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
DebugFlags=Gres
MailProg=/bin/true
MpiDefault=none
{tracking}
JobAcctGatherType=jobacct_gather/none
# No slurmdbd (it needs MariaDB): no sacct, and no AccountingStorageTRES=gres/gpu
# (slurmctld refuses it without slurmdbd). The completion log is a plain text file.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
# The test declares more CPUs than a small machine has, so jobs do not queue on CPUs.
SlurmdParameters=config_overrides
ReturnToService=2
FirstJobId={layout.first_job_id}
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
KillWait=2
MinJobAge=600
PrologFlags={layout.prolog_flags}
Prolog={hook}
Epilog={hook}
PrologSlurmctld={hook}
EpilogSlurmctld={hook}
{nodes}
PartitionName=gpu Nodes={names} Default=YES MaxTime=INFINITE State=UP
"""


def gres_conf(layout: Layout) -> str:
    if layout.pci_order is not None:
        return "# The GPUs come from fake_gpus.conf, as from AutoDetect=nvml.\n"
    lines = []
    for node in layout.nodes:
        files = ",".join(str(layout.device(node, m)) for m in node.gpu_minors)
        lines.append(f"NodeName={node.name} Name=gpu File={files}")
    return "\n".join(lines) + "\n"


def fake_gpus_conf(layout: Layout) -> str:
    """Slurm's own test hook for GPU autodetection (read by gres/gpu when the file
    exists): type|cpu_count|cpu_range|links|device_file. The -1 in `links` is the GPU's
    place in NVML's enumeration, which Slurm sorts by, as it does with AutoDetect=nvml.
    Lines are written in minor order, so any other order comes from the links alone."""
    assert layout.pci_order is not None
    count = len(layout.pci_order)
    lines = []
    for node in layout.nodes:
        for minor in sorted(layout.pci_order):
            place = layout.pci_order.index(minor)
            links = ",".join("-1" if i == place else "0" for i in range(count))
            device = layout.device(node, minor)
            lines.append(f"tesla|{layout.cpus_per_node}|(null)|{links}|{device}")
    return "\n".join(lines) + "\n"


def cgroup_conf(layout: Layout) -> str:
    return f"""\
CgroupPlugin=cgroup/{layout.cgroup}
CgroupMountpoint=/sys/fs/cgroup
CgroupAutomount=no
ConstrainDevices=yes
ConstrainCores=no
ConstrainRAMSpace=no
"""


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


def write_files(layout: Layout) -> bool:
    """The folders, device files, configuration, hook script and MUNGE key under the
    root; whether the device files are character devices (see make_devices)."""
    root = layout.root
    for folder in ("etc", "run", "state", "log", "records", "bin"):
        (root / folder).mkdir(mode=0o755)
    layout.munge_dir.mkdir(mode=0o700)
    layout.work.mkdir()
    layout.work.chmod(0o1777)
    for context in CONTEXTS:
        (layout.hooks / context).mkdir(parents=True)
    devices_are_char = True
    for node in layout.nodes:
        (root / "spool" / node.name).mkdir(parents=True)
        devices_are_char &= make_devices(layout, node)
    layout.slurm_conf.write_text(slurm_conf(layout))
    (layout.etc / "gres.conf").write_text(gres_conf(layout))
    if layout.pci_order is not None:
        (layout.etc / "fake_gpus.conf").write_text(fake_gpus_conf(layout))
    if layout.cgroup:
        (layout.etc / "cgroup.conf").write_text(cgroup_conf(layout))
    layout.hook_script.write_text(hook_script(layout))
    layout.hook_script.chmod(0o755)
    key = layout.munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    return devices_are_char


def make_devices(layout: Layout, node: Node) -> bool:
    """Character devices 195:minor like /dev/nvidiaN (opening one fails: no driver);
    plain files where mknod is not allowed (False: device limits cannot be observed)."""
    layout.device(node, 0).parent.mkdir(parents=True)
    made = True
    for minor in node.gpu_minors:
        path = layout.device(node, minor)
        try:
            os.mknod(path, 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, minor))
        except PermissionError:
            path.touch()
            made = False
    return made
