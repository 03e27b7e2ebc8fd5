"""Our agent against a live board: enroll, push, survive an outage, replay, nothing lost twice."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import psycopg

from tests.interop.conftest import LiveBoard, clean_env, start_board, stop_board


def test_outage_leaves_no_gap_and_no_double_count(
    live_board: LiveBoard, database_url: str, tmp_path: Path
) -> None:
    live_board.cli("create-workspace", "lab")
    member = live_board.cli_json(
        "create-user", "lead@lab.example", "--workspace", "lab", "--role", "member"
    )
    issued = live_board.cli_json("issue-token", "--workspace", "lab")
    config, spool = tmp_path / "agent.json", tmp_path / "spool"
    env = clean_env({})
    agent = [sys.executable, "-m", "agent"]
    enrolled = subprocess.run(
        [
            *agent,
            "enroll",
            "--server-url",
            live_board.url,
            "--config",
            str(config),
            "--enrollment-token",
            issued["enrollmentToken"],
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert enrolled.returncode == 0, enrolled.stderr
    assert issued["enrollmentToken"] not in enrolled.stdout + enrolled.stderr
    once = subprocess.run(
        [*agent, "push-once", "--fake", "--config", str(config), "--spool-dir", str(spool)],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert once.returncode == 0, once.stderr

    runner = subprocess.Popen(
        [
            *agent,
            "run",
            "--fake",
            "--interval",
            "1s",
            "--config",
            str(config),
            "--spool-dir",
            str(spool),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    board = live_board
    try:
        time.sleep(4)
        port = urlparse(board.url).port
        stop_board(board)  # the board is down; the agent keeps collecting and spools
        time.sleep(6)
        board = start_board(database_url, tmp_path / "board-data-2", port=port)
        time.sleep(8)  # back: the spool drains oldest first
    finally:
        runner.terminate()
        runner.wait(20)
    try:
        hosts = httpx.get(
            f"{board.url}/api/v1/workspaces/lab/hosts",
            headers={"Authorization": f"Bearer {member['apiToken']}"},
        ).json()
        assert hosts["hosts"][0]["freshness"] == "ok"
        assert len(hosts["hosts"][0]["gpus"]) == 4
        with psycopg.connect(database_url) as conn:
            times = [
                r[0]
                for r in conn.execute(
                    "SELECT observed_at FROM host_observations ORDER BY observed_at"
                ).fetchall()
            ]
            covered_us = conn.execute("SELECT sum(covered_us) FROM gpu_hour_rollups").fetchone()[0]
        gaps = [(b - a).total_seconds() for a, b in zip(times[1:], times[2:], strict=False)]
        assert len(times) >= 15
        assert max(gaps) < 2.5, gaps  # the outage left no hole: spooled ticks were replayed
        span_us = (times[-1] - times[0]).total_seconds() * 1_000_000
        # No double count: covered time is exactly 4 GPUs x the observed span.
        assert abs(int(covered_us) - 4 * span_us) < 10
    finally:
        if board is not live_board:
            stop_board(board)
