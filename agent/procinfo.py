"""Who runs a process, what it is called and which scheduler job it runs in, from /proc.
Never reads command lines or environ."""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Callable
from pathlib import Path

from agent.model import UNKNOWN

# The kernel's "no login uid" value (set for processes started by daemons, not by a login).
LOGINUID_UNSET = 4294967295
# comm is at most 16 bytes (TASK_COMM_LEN); read a little more and trust nothing beyond it.
_COMM_MAX_BYTES = 64
# /proc/PID/cgroup has one short line per hierarchy (a dozen under cgroup v1, one under
# v2); a few KiB holds every real one, and a hostile or odd entry is never read further.
CGROUP_MAX_BYTES = 4096
# Slurm's job cgroup, v1 (`…/slurm[_node]/uid_0/job_198005/step_batch`) and v2
# (`0::/system.slice/slurmstepd.scope/job_198005/step_batch/user/task_0`). Slurm's job
# ids are 32-bit; a longer run of digits is not a Slurm job.
_SLURM_JOB = re.compile(r"/job_([0-9]{1,10})(?:/|$)")


def slurm_job_id(cgroup_text: str) -> str | None:
    """The Slurm job id named in the text of /proc/PID/cgroup, or None.

    The first line that names one wins (every hierarchy of a job's process names the
    same job). The id is the job's raw id: an array task's own number, not `123_4`."""
    for line in cgroup_text.splitlines():
        match = _SLURM_JOB.search(line)
        if match is not None:
            return str(int(match.group(1)))
    return None


def passwd_name(uid: int) -> str | None:
    """The passwd entry's name for a uid, or None when the uid has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


class ProcInfo:
    """Resolves a pid's Linux user and short name under a proc root (a parameter, for tests).

    The user is the login uid of the process (who logged in, kept across sudo and su),
    else the owner of /proc/<pid> (jobs started by a daemon such as Slurm have no login
    uid but run as their user), else `unknown`. A uid without a passwd entry counts as
    unresolved. The name is /proc/<pid>/comm, else `unknown`.
    """

    def __init__(
        self,
        proc_root: str | os.PathLike[str] = "/proc",
        uid_to_name: Callable[[int], str | None] = passwd_name,
    ) -> None:
        self._root = Path(proc_root)
        self._uid_to_name = uid_to_name

    def job_id(self, pid: int) -> str | None:
        """The Slurm job the process runs in, from its cgroup; None when none (or unreadable)."""
        try:
            with open(self._root / str(pid) / "cgroup", "rb") as fh:
                raw = fh.read(CGROUP_MAX_BYTES)
        except OSError:
            return None
        if len(raw) >= CGROUP_MAX_BYTES:
            # Cut short: the last line may be half of one (`/job_12` of `/job_123/…`).
            raw = raw[: raw.rfind(b"\n") + 1]
        return slurm_job_id(raw.decode("ascii", errors="replace"))

    def user(self, pid: int) -> str:
        """The Linux user a process belongs to, or `unknown`."""
        base = self._root / str(pid)
        for uid in (self._loginuid(base), self._owner_uid(base)):
            if uid is None:
                continue
            name = self._uid_to_name(uid)
            if name:
                return name
        return UNKNOWN

    def name(self, pid: int) -> str:
        """The process's short name (its comm), or `unknown`."""
        try:
            with open(self._root / str(pid) / "comm", "rb") as fh:
                raw = fh.read(_COMM_MAX_BYTES)
        except OSError:
            return UNKNOWN
        text = raw.decode("utf-8", errors="replace").strip()
        # A name is for people reading the board: keep it printable and short.
        text = "".join(ch for ch in text if ch.isprintable())[:_COMM_MAX_BYTES]
        return text or UNKNOWN

    @staticmethod
    def _loginuid(base: Path) -> int | None:
        try:
            text = (base / "loginuid").read_text(encoding="ascii", errors="replace").strip()
            uid = int(text)
        except (OSError, ValueError):
            return None
        if uid < 0 or uid == LOGINUID_UNSET:
            return None
        return uid

    @staticmethod
    def _owner_uid(base: Path) -> int | None:
        try:
            return base.stat().st_uid
        except OSError:
            return None
