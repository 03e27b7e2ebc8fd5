"""Our agent against a live board: enroll, push, survive an outage, replay, nothing lost twice.

Every phase waits for what it needs to see (pushes arriving, snapshots spooled, the spool
replayed) with a generous deadline rather than sleeping a fixed time, so a slow or loaded
machine makes the test longer, never red.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

import httpx
import psycopg
import pytest

from tests.support.live import LiveBoard, clean_env, start_board, stop_board

# Seconds to wait for each phase; the agent's retry backoff after an outage alone may be
# half a minute, and a loaded machine is slow to start a board.
PHASE_DEADLINE = 180.0
# The agent spools each snapshot under a name made of its `observedAt` (agent/spool.py).
SPOOL_NAME_FORMAT = "%Y%m%dT%H%M%S.%fZ.json"
MAX_SAMPLE_GAP_US = 120 * 1_000_000  # the workspace default: a longer gap is not covered


def _wait_for(condition: Callable[[], bool], what: str, agent_log: Path) -> None:
    deadline = time.monotonic() + PHASE_DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {PHASE_DEADLINE:.0f}s for {what}; agent log:\n{_tail(agent_log)}")
        time.sleep(0.3)


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(none)"


def _stored_times(database_url: str) -> set[datetime]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT observed_at FROM host_observations").fetchall()
    return {row[0] for row in rows}


def _spooled_times(spool: Path) -> set[datetime]:
    """The observedAt of every snapshot in the spool now (temp files are skipped)."""
    times = set()
    for path in spool.glob("*.json"):
        try:
            times.add(datetime.strptime(path.name, SPOOL_NAME_FORMAT).replace(tzinfo=UTC))
        except ValueError:
            continue
    return times


def _to_us(delta: timedelta) -> int:
    return delta // timedelta(microseconds=1)


@pytest.mark.timeout(900)
def test_outage_leaves_no_gap_and_no_double_count(
    live_board: LiveBoard, database_url: str, tmp_path: Path
) -> None:
    live_board.cli("create-workspace", "lab")
    member = live_board.cli_json(
        "create-user", "lead@lab.example", "--workspace", "lab", "--role", "member"
    )
    issued = live_board.cli_json("issue-token", "--workspace", "lab")
    config, spool, agent_log = tmp_path / "agent.json", tmp_path / "spool", tmp_path / "agent.log"
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
        timeout=120,
    )
    assert enrolled.returncode == 0, enrolled.stderr
    assert issued["enrollmentToken"] not in enrolled.stdout + enrolled.stderr
    once = subprocess.run(
        [*agent, "push-once", "--fake", "--config", str(config), "--spool-dir", str(spool)],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert once.returncode == 0, once.stderr

    def hosts() -> list[dict[str, object]]:
        answer = httpx.get(
            f"{board.url}/api/v1/workspaces/lab/hosts",
            headers={"Authorization": f"Bearer {member['apiToken']}"},
            timeout=30,
        )
        answer.raise_for_status()
        found: list[dict[str, object]] = answer.json()["hosts"]
        return found

    with agent_log.open("wb") as log:
        runner = subprocess.Popen(
            [
                *agent,
                "run",
                "--fake",
                "--interval",
                "2s",
                "--config",
                str(config),
                "--spool-dir",
                str(spool),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    board = live_board
    try:
        # Up: the running agent's pushes arrive (one more than push-once's is enough).
        _wait_for(lambda: len(_stored_times(database_url)) >= 3, "the agent's pushes", agent_log)
        port = urlparse(board.url).port
        stop_board(board)
        down_since = datetime.now(UTC)

        def taken_while_down() -> set[datetime]:
            # (A snapshot spooled earlier, say one that timed out on a busy machine, is
            # replayed as well, but it does not show what an outage does.)
            return {t for t in _spooled_times(spool) if t > down_since}

        # Down: the agent keeps collecting, and spools what it cannot send.
        _wait_for(lambda: len(taken_while_down()) >= 3, "snapshots in the spool", agent_log)
        outage = taken_while_down()  # listed while the board is still down
        board = start_board(database_url, tmp_path / "board-data-2", port=port)
        # Back: the spool is replayed, and fresh pushes keep the host fresh.
        _wait_for(
            lambda: outage <= _stored_times(database_url) and hosts()[0]["freshness"] == "ok",
            "the spool to be replayed",
            agent_log,
        )
    finally:
        runner.terminate()
        try:
            runner.wait(60)
        except subprocess.TimeoutExpired:
            runner.kill()
            runner.wait(60)
    try:
        (host,) = hosts()
        assert host["freshness"] == "ok"
        assert isinstance(host["gpus"], list)
        assert len(host["gpus"]) == 4
        with psycopg.connect(database_url) as conn:
            # One statement, one snapshot: the observations and the rollups agree.
            row = conn.execute(
                "SELECT (SELECT array_agg(observed_at ORDER BY observed_at)"
                "        FROM host_observations),"
                "       (SELECT sum(covered_us) FROM gpu_hour_rollups)"
            ).fetchone()
        assert row is not None
        times, covered_us = row
        # No hole: every snapshot taken while the board was down was replayed into it.
        assert outage <= set(times)
        # No double count: covered time is exactly 4 GPUs x every interval that counts
        # (all of them unless the machine stalled for minutes), each once.
        gaps_us = [_to_us(b - a) for a, b in zip(times, times[1:], strict=False)]
        expected_us = 4 * sum(gap for gap in gaps_us if 0 < gap <= MAX_SAMPLE_GAP_US)
        assert int(covered_us) == expected_us, (covered_us, gaps_us)
    finally:
        if board is not live_board:
            stop_board(board)
