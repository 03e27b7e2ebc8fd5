"""`gua-board demo` as a new user runs it: the embedded PostgreSQL, then Ctrl-C.

Ctrl-C stops everything the command started (the board and the embedded PostgreSQL,
whose six processes used to outlive it) and says where the demo's data stays.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from tests.support.live import wait_for
from tests.support.ports import free_port

BIN = Path(sys.executable).parent


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/signin", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def test_ctrl_c_stops_the_demo_and_its_embedded_postgresql(tmp_path: Path) -> None:
    data = tmp_path / "demo-data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUA_BOARD_")}
    env["GUA_BOARD_DATA_DIR"] = str(data)
    port = free_port()
    proc = subprocess.Popen(
        [str(BIN / "gua-board"), "demo", "--port", str(port), "--hosts", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        wait_for(lambda: _answers(port), "the demo board to answer", seconds=240)
        assert (data / "pgdata" / "postmaster.pid").exists()  # the embedded server runs
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    said = "".join(lines)
    assert "Demo stopped, and its embedded PostgreSQL too." in said, said[-2000:]
    assert str(data) in said
    assert not (data / "pgdata" / "postmaster.pid").exists()
