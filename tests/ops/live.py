"""Served boards for the operations tests: `gua-board serve` as real processes."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

BIN = Path(sys.executable).parent
EXAMPLE = Path(__file__).resolve().parents[1] / "board" / "examples" / "observation-1.8.0-fake.json"
START_SECONDS = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Callable[[], Any], what: str, seconds: float = 60.0) -> Any:
    """Poll `check` until it returns something truthy; fail after a generous deadline."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.2)


@dataclass
class ServedBoard:
    url: str
    port: int
    env: dict[str, str] = field(repr=False)
    process: subprocess.Popen[bytes]
    log: Path

    def log_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def cli(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [str(BIN / "gua-board"), *args],
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, trust_env=False, **kw)

    def metrics(self) -> str:
        with self.client() as c:
            r = c.get("/metrics")
        assert r.status_code == 200, r.text
        return r.text


def env_for(
    database_url: str, data_dir: Path, extra: dict[str, str] | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(
        {
            "NO_PROXY": "127.0.0.1,localhost",
            "GUA_BOARD_DATABASE_URL": database_url,
            "GUA_BOARD_DATA_DIR": str(data_dir),
            "GUA_BOARD_SECRET_KEY": secrets.token_urlsafe(36),
            **(extra or {}),
        }
    )
    return env


def start(
    database_url: str,
    data_dir: Path,
    extra: dict[str, str] | None = None,
    *,
    workers: int = 1,
    host: str = "127.0.0.1",
    port: int | None = None,
) -> ServedBoard:
    port = port or free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    env = env_for(database_url, data_dir, extra)
    log = data_dir / f"serve-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(BIN / "gua-board"), "serve", "--host", host, "--port", str(port)]
            + ["--workers", str(workers)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    board = ServedBoard(f"http://127.0.0.1:{port}", port, env, process, log)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"gua-board serve exited: {log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{board.url}/healthz", timeout=5, trust_env=False).status_code == 200:
                return board
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    stop(board)
    raise AssertionError(f"gua-board serve did not start: {log.read_text()[-3000:]}")


def stop(board: ServedBoard) -> None:
    if board.process.poll() is not None:
        return
    board.process.terminate()
    try:
        board.process.wait(30)
    except subprocess.TimeoutExpired:
        board.process.kill()
        board.process.wait(30)


@dataclass
class Fleet:
    """A workspace made through the CLI, its admin's API token, and enrolled hosts."""

    slug: str
    admin_token: str
    email: str
    password: str

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}


def make_fleet(board: ServedBoard, slug: str) -> Fleet:
    board.cli("create-workspace", slug)
    password = secrets.token_urlsafe(18)
    email = f"admin@{slug}.example"
    made = json.loads(
        board.cli(
            "create-user",
            email,
            "--workspace",
            slug,
            "--role",
            "admin",
            "--password-stdin",
            "--json",
            stdin=password + "\n",
        )
    )
    return Fleet(slug, made["apiToken"], email, password)


def enroll(board: ServedBoard, fleet: Fleet, hostname: str) -> dict[str, Any]:
    with board.client() as c:
        issued = c.post(
            f"/api/v1/workspaces/{fleet.slug}/enrollment-tokens", json={}, headers=fleet.auth()
        )
        assert issued.status_code == 201, issued.text
        claimed = c.post(
            "/agent/v1/enrollments/claim",
            json={
                "enrollmentToken": issued.json()["enrollmentToken"],
                "hostname": hostname,
                "agentVersion": "1.8.0",
            },
        )
    assert claimed.status_code == 201, claimed.text
    host: dict[str, Any] = claimed.json()
    return host


def observation(at: datetime | None = None) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(EXAMPLE.read_text())
    body["observedAt"] = (at or datetime.now(UTC)).isoformat()
    return body


def push(board: ServedBoard, agent_token: str, body: Any) -> httpx.Response:
    with board.client() as c:
        return c.post(
            "/agent/v1/observations",
            json=body,
            headers={"Authorization": f"Bearer {agent_token}"},
        )


def sample_value(text: str, name: str, labels: str = "") -> float:
    """One sample of a Prometheus text page (0 when absent), e.g. name_total{reason="x"}."""
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        if key == wanted:
            return float(value)
    return 0.0
