"""/proc lookups: the Linux user and short name of a pid, nothing else."""

from __future__ import annotations

import os
import pwd
from datetime import UTC, datetime

from agent.model import Collection, GpuReading, ProcessReading
from agent.payload import HostIdentity, build_observation, encode_observation
from agent.procinfo import ProcInfo, passwd_name
from board.ingest.schemas import SnapshotIn
from tests.agent.fakes import (
    FakeProcRoot,
)

USERS = {1000: "alice", 1001: "bob"}


def test_loginuid_wins_over_owner(proc_root: FakeProcRoot) -> None:
    base = proc_root.add(10, loginuid="1000")
    os.chown(base, 1001, 1001)  # e.g. alice ran it through sudo -u bob
    assert ProcInfo(proc_root.root, USERS.get).user(10) == "alice"


def test_unset_loginuid_falls_back_to_owner(proc_root: FakeProcRoot) -> None:
    base = proc_root.add(11, loginuid="4294967295")  # started by a daemon (Slurm, systemd)
    os.chown(base, 1001, 1001)
    assert ProcInfo(proc_root.root, USERS.get).user(11) == "bob"


def test_missing_or_garbled_loginuid_falls_back_to_owner(proc_root: FakeProcRoot) -> None:
    os.chown(proc_root.add(12), 1000, 1000)
    os.chown(proc_root.add(13, loginuid="not-a-number"), 1000, 1000)
    info = ProcInfo(proc_root.root, USERS.get)
    assert (info.user(12), info.user(13)) == ("alice", "alice")


def test_uid_without_passwd_entry_is_unresolved(proc_root: FakeProcRoot) -> None:
    base = proc_root.add(14, loginuid="4000")
    os.chown(base, 4001, 4001)
    assert ProcInfo(proc_root.root, USERS.get).user(14) == "unknown"


def test_loginuid_without_entry_falls_back_to_owner(proc_root: FakeProcRoot) -> None:
    base = proc_root.add(15, loginuid="4000")
    os.chown(base, 1000, 1000)
    assert ProcInfo(proc_root.root, USERS.get).user(15) == "alice"


def test_vanished_pid_is_unknown(proc_root: FakeProcRoot) -> None:
    info = ProcInfo(proc_root.root, USERS.get)
    assert (info.user(999), info.name(999)) == ("unknown", "unknown")


def test_name_is_comm_never_cmdline(proc_root: FakeProcRoot) -> None:
    proc_root.add(20, comm="pt_main_thread")
    assert ProcInfo(proc_root.root).name(20) == "pt_main_thread"


def test_name_unreadable_or_empty_is_unknown(proc_root: FakeProcRoot) -> None:
    proc_root.add(21, comm=None)
    proc_root.add(22, comm="")
    info = ProcInfo(proc_root.root)
    assert (info.name(21), info.name(22)) == ("unknown", "unknown")


def test_name_control_characters_removed(proc_root: FakeProcRoot) -> None:
    base = proc_root.add(23, comm=None)
    (base / "comm").write_bytes(b"ev\x1b[31mil\n")
    assert ProcInfo(proc_root.root).name(23) == "ev[31mil"


def test_real_passwd_lookup() -> None:
    me = os.getuid()
    assert passwd_name(me) == pwd.getpwuid(me).pw_name
    assert passwd_name(2**31 - 2) is None


def test_real_proc_for_this_process() -> None:
    info = ProcInfo()
    assert info.name(os.getpid()) != "unknown"
    assert info.user(os.getpid()) != "unknown"


def test_a_comm_of_invalid_utf8_and_control_bytes_is_cleaned(proc_root: FakeProcRoot) -> None:
    base = proc_root.add(42)
    (base / "comm").write_bytes(b"py\xff\x00th\x1bon\n")
    name = ProcInfo(proc_root.root, uid_to_name=lambda _uid: "al\udcffice").name(42)
    assert "\x00" not in name
    assert "\x1b" not in name
    user = ProcInfo(proc_root.root, uid_to_name=lambda _uid: "al\udcffice").user(42)
    proc = ProcessReading(42, user, name, "compute", None)
    gpu = GpuReading(0, "GPU-1", "A100", 10, 1, 1, None, None, (proc,))
    body = encode_observation(
        build_observation(Collection("550", (gpu,)), HostIdentity("h", "1"), datetime.now(UTC))
    )
    SnapshotIn.model_validate_json(body)
