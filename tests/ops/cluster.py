"""A private PostgreSQL cluster for the tests that stop and start their database.

The shared server of the other tests must stay up, so these get their own: initdb into
a temporary folder, on a free port, with Debian's server binaries (or pgserver's). As
root (CI), initdb and postgres refuse to run, so they run as the `postgres` user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.support.ports import free_port

MISSING = (
    "No PostgreSQL server binaries (initdb, pg_ctl) were found under "
    "/usr/lib/postgresql/*/bin or in the pgserver package: install Debian's "
    "postgresql package (CI has it) to run the database restart tests."
)


def server_binaries() -> Path:
    """The newest Debian server's bin folder, else pgserver's; a clear failure if none."""
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if debian:
        return debian[-1].parent
    try:
        from pgserver import _commands

        bundled = Path(_commands.POSTGRES_BIN_PATH)
    except ImportError:
        bundled = None
    if bundled is not None and (bundled / "pg_ctl").exists():
        return bundled
    raise AssertionError(MISSING)


class Cluster:
    """One initdb'd cluster listening on 127.0.0.1:`port`, trust authentication."""

    def __init__(self, root: Path, binaries: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.binaries = binaries
        self.port = free_port()
        self.log = root / "postgres.log"
        # fsync off: a crash of the server (-m immediate) still loses nothing, since
        # what was committed is in the kernel's cache; only a crash of the machine would.
        self.options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {root} -c fsync=off "
            "-c full_page_writes=off"
        )
        self.user = "postgres" if os.geteuid() == 0 else None

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, tool: str, *args: str, timeout: float = 120) -> None:
        command = [str(self.binaries / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise AssertionError(
                f"{tool} {' '.join(args)} failed: {done.stderr[-2000:]}\n{log}".strip()
            )

    def init(self) -> None:
        self._run(
            "initdb",
            *("-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8"),
            *("--no-sync", "--no-instructions"),
        )

    def start(self) -> None:
        self._run(
            "pg_ctl",
            *("-D", str(self.data), "-l", str(self.log), "-o", self.options),
            *("-w", "-t", "90", "start"),
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "90", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@contextmanager
def private_cluster() -> Iterator[Cluster]:
    """A started cluster, stopped and deleted afterwards however the test ended."""
    binaries = server_binaries()
    # Not pytest's tmp_path: its parents are root's alone, and the server runs as postgres.
    root = Path(tempfile.mkdtemp(prefix="gua-pg-"))
    cluster = Cluster(root, binaries)
    try:
        if cluster.user is not None:
            try:
                owner = pwd.getpwnam(cluster.user)
            except KeyError:
                raise AssertionError(
                    "Running as root, the test cluster runs as the `postgres` user, and "
                    "there is none: install Debian's postgresql package."
                ) from None
            os.chown(root, owner.pw_uid, owner.pw_gid)
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        if cluster.running():
            try:
                cluster.stop("immediate")
            except AssertionError:
                pass  # already gone; the folder goes either way
        shutil.rmtree(root, ignore_errors=True)
