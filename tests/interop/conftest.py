"""Fixtures for tests against real processes: the released `gua` agent and `gua-board serve`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("GUA_TEST_CACHE", REPO / "tests" / ".cache"))
BIN = Path(sys.executable).parent


def _python312() -> str | None:
    for candidate in (
        os.environ.get("GUA_TEST_PYTHON312"),
        shutil.which("python3.12"),
        "/root/.pyenv/versions/3.12.1/bin/python3.12",
    ):
        if candidate and Path(candidate).exists():
            probe = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
                capture_output=True,
                text=True,
            )
            if probe.returncode == 0 and probe.stdout.strip() == "True":
                return candidate
    return None


@pytest.fixture(scope="session")
def gua_agent() -> Callable[[str], Path]:
    """Path to the `gua` executable of a released gpu-usage-audit version (cached venv)."""

    def install(version: str) -> Path:
        python = _python312()
        if python is None:
            pytest.skip("the released gua agent needs Python 3.12, and none was found here")
        venv = CACHE / f"gua-{version}"
        gua = venv / "bin" / "gua"
        if not gua.exists():
            subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
            done = subprocess.run(
                [str(venv / "bin" / "pip"), "install", "-q", f"gpu-usage-audit=={version}"],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                pytest.skip(f"could not install gpu-usage-audit {version}: {done.stderr[-500:]}")
        return gua

    return install


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveBoard:
    url: str
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path

    def cli(self, *args: str, stdin: str | None = None) -> str:
        """Run `gua-board …` against the same database; returns stdout."""
        done = subprocess.run(
            [str(BIN / "gua-board"), *args],
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def cli_json(self, *args: str) -> dict[str, str]:
        data: dict[str, str] = json.loads(self.cli(*args, "--json"))
        return data


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def start_board(
    database_url: str, data_dir: Path, workers: int = 1, port: int | None = None
) -> LiveBoard:
    port = port or free_port()
    env = clean_env({"GUA_BOARD_DATABASE_URL": database_url, "GUA_BOARD_DATA_DIR": str(data_dir)})
    log = data_dir / f"board-{port}.log"
    data_dir.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(BIN / "gua-board"), "serve", "--port", str(port), "--workers", str(workers)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"gua-board serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return LiveBoard(url, env, process, log)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise AssertionError(f"gua-board serve did not start: {log.read_text()[-2000:]}")


def stop_board(board: LiveBoard) -> None:
    board.process.terminate()
    try:
        board.process.wait(15)
    except subprocess.TimeoutExpired:
        board.process.kill()


@pytest.fixture
def live_board(database_url: str, tmp_path: Path) -> Iterator[LiveBoard]:
    """`gua-board serve` as a subprocess on a free loopback port, on this test's database."""
    board = start_board(database_url, tmp_path / "board-data")
    yield board
    stop_board(board)
