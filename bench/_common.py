"""Helpers shared by the benchmarks: scratch databases, server processes, RSS/CPU sampling.

Also the "floor" app: a bare FastAPI endpoint that only validates an observation, so
a benchmark can show what the machine does with no database at all. Start it with
`uvicorn --app-dir bench _common:create_floor_app --factory`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psutil  # type: ignore[import-untyped]
import psycopg
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from psycopg import sql
from pydantic import ValidationError

from board.ingest.schemas import SnapshotIn

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


# --- databases ------------------------------------------------------------------------


def with_database(url: str, dbname: str) -> str:
    """The same server URL pointing at another database (query string kept)."""
    parts = urlsplit(url)
    scheme = "postgresql" if parts.scheme.startswith("postgres") else parts.scheme
    return urlunsplit((scheme, parts.netloc, "/" + dbname, parts.query, ""))


def server_url() -> str:
    """GUA_BOARD_DATABASE_URL's server, else the local PostgreSQL."""
    configured = os.environ.get("GUA_BOARD_DATABASE_URL") or DEFAULT_SERVER_URL
    return with_database(configured.replace("postgresql+psycopg://", "postgresql://"), "postgres")


@contextlib.contextmanager
def scratch_database(prefix: str = "gua_bench") -> Iterator[str]:
    """A fresh, empty database on the server; dropped (connections and all) afterwards."""
    admin = server_url()
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(admin, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def server_version(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"


def backend_pids(url: str) -> list[int]:
    """PostgreSQL backends connected to this URL's database, but not this query's own."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(r[0]) for r in rows]


# --- processes ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def venv_script(name: str) -> str:
    """A console script installed beside the running interpreter (the project's venv)."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    base_url: str
    log_path: Path

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def start_server(
    name: str, argv: list[str], env: dict[str, str], port: int, log_dir: Path
) -> Server:
    log_path = log_dir / f"{name}.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        argv, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    return Server(name, proc, f"http://127.0.0.1:{port}", log_path)


def wait_healthy(server: Server, timeout: float = 60.0) -> None:
    """Until /healthz answers; the master binds the socket, so this means a worker is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited early:\n{server.log_tail()}")
        try:
            if httpx.get(server.base_url + "/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{server.name} did not become healthy in {timeout:.0f}s")


def stop_server(server: Server, timeout: float = 20.0) -> None:
    """SIGINT to the uvicorn master (graceful, it stops its workers), then kill if stuck."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGINT)
        try:
            server.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait(5)


def process_tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def cpu_seconds(procs: dict[int, psutil.Process]) -> dict[int, float]:
    out: dict[int, float] = {}
    for pid, p in procs.items():
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            out[pid] = t.user + t.system
    return out


@dataclass
class TreeSampler:
    """Samples the summed RSS of a process tree from a thread; keeps the peak."""

    pid: int
    interval: float = 0.2
    peak_rss: int = 0
    peak_procs: int = 0
    seen: dict[int, psutil.Process] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        total = 0
        procs = process_tree(self.pid)
        for p in procs:
            self.seen.setdefault(p.pid, p)
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        if total > self.peak_rss:
            self.peak_rss, self.peak_procs = total, len(procs)

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.interval):
                self.sample()

        self.sample()
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def cpu(self) -> dict[int, float]:
        self.sample()
        return cpu_seconds(self.seen)


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two snapshots; processes born in between count from 0."""
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (all cores, all users), from psutil."""
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


# --- the floor ------------------------------------------------------------------------


def create_floor_app() -> FastAPI:
    """POST /agent/v1/observations that reads and validates the body, stores nothing."""
    app = FastAPI()

    @app.post("/agent/v1/observations")
    async def observations(request: Request) -> JSONResponse:
        body = await request.body()
        try:
            snapshot = SnapshotIn.model_validate_json(body)
        except ValidationError:
            return JSONResponse({"detail": "invalid payload"}, status_code=422)
        return JSONResponse(
            {"status": "accepted", "duplicate": False, "observedAt": snapshot.observedAt},
            status_code=202,
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


async def enroll_in_process(
    client: httpx.AsyncClient, slug: str, auth: dict[str, str], hosts: int
) -> list[str]:
    """Enroll `hosts` hosts named gpu-0… through an in-process app; their agent tokens."""
    tokens = []
    for n in range(hosts):
        issued = await client.post(
            f"/api/v1/workspaces/{slug}/enrollment-tokens", json={}, headers=auth
        )
        claimed = await client.post(
            "/agent/v1/enrollments/claim",
            json={
                "enrollmentToken": issued.json()["enrollmentToken"],
                "hostname": f"gpu-{n}",
                "agentVersion": "1.8.0",
            },
        )
        tokens.append(claimed.json()["agentToken"])
    return tokens
