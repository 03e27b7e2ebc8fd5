"""With no database configured, every command shares one embedded PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.live import clean_env
from tests.support.ports import free_port

BIN = Path(sys.executable).parent


def test_serve_and_commands_share_the_embedded_server(tmp_path: Path) -> None:
    env = clean_env({"GUA_BOARD_DATA_DIR": str(tmp_path / "data")})
    env.pop("GUA_BOARD_DATABASE_URL", None)
    port = free_port()
    server = subprocess.Popen(
        [str(BIN / "gua-board"), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # initdb, start and every migration on a shared 2-core box: a generous deadline.
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise AssertionError(f"gua-board serve exited with {server.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            raise AssertionError("board on the embedded PostgreSQL did not start")

        def cli(*args: str) -> str:
            done = subprocess.run(
                [str(BIN / "gua-board"), *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            return done.stdout

        cli("create-workspace", "solo")
        import json

        token = json.loads(
            cli(
                "create-user", "me@solo.example", "--workspace", "solo", "--role", "admin", "--json"
            )
        )["apiToken"]
        r = httpx.get(
            f"http://127.0.0.1:{port}/api/v1/workspaces/solo/hosts",
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200  # the server sees what the command wrote: one database
        assert (tmp_path / "data" / "pgdata" / "PG_VERSION").exists()
    finally:
        server.terminate()
        server.wait(20)
        pgdata = tmp_path / "data" / "pgdata"
        subprocess.run(
            ["su", "pgserver", "-s", "/bin/sh", "-c", f"pg_ctl -D {pgdata} stop -m fast"]
            if os.geteuid() == 0
            else ["pg_ctl", "-D", str(pgdata), "stop", "-m", "fast"],
            capture_output=True,
            env={**env, "PATH": _pg_bin() + ":" + env.get("PATH", "")},
        )


def _pg_bin() -> str:
    from pgserver import _commands

    return str(_commands.POSTGRES_BIN_PATH)
