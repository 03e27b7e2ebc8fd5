"""The released `gua` agent, unchanged, enrolls with and pushes to a live board."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.live import LiveBoard, clean_env


@pytest.mark.parametrize("version", ["1.8.0", "1.3.0", "1.1.0"])
def test_released_agent_enrolls_and_syncs(
    version: str, gua_agent: Callable[[str], Path], live_board: LiveBoard, tmp_path: Path
) -> None:
    gua = gua_agent(version)
    live_board.cli("create-workspace", "lab", "--name", "Lab")
    member = live_board.cli_json(
        "create-user", "lead@lab.example", "--workspace", "lab", "--role", "member"
    )
    issued = live_board.cli_json("issue-token", "--workspace", "lab", "--display-name", "gpu-01")
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env({"HOME": str(home)})

    enrolled = subprocess.run(
        [
            str(gua),
            "enroll",
            "--server-url",
            live_board.url,
            "--enrollment-token",
            issued["enrollmentToken"],
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert enrolled.returncode == 0, enrolled.stdout + enrolled.stderr
    assert issued["enrollmentToken"] not in enrolled.stdout + enrolled.stderr

    synced = subprocess.run(
        [str(gua), "sync-once", "--fake"], env=env, capture_output=True, text=True, timeout=60
    )
    assert synced.returncode == 0, synced.stdout + synced.stderr

    hosts = httpx.get(
        f"{live_board.url}/api/v1/workspaces/lab/hosts",
        headers={"Authorization": f"Bearer {member['apiToken']}"},
    ).json()["hosts"]
    [host] = hosts
    assert host["displayName"] == "gpu-01"
    assert host["agentVersion"] == version
    assert host["freshness"] == "ok"
    assert [g["uuid"] for g in host["gpus"]] == ["GPU-0", "GPU-1", "GPU-2"]
    users = {p["linuxUser"] for g in host["gpus"] for p in g["processes"]}
    assert {"alice", "bob"} <= users

    # The same token cannot enroll a second host.
    again = subprocess.run(
        [
            str(gua),
            "enroll",
            "--server-url",
            live_board.url,
            "--force",
            "--enrollment-token",
            issued["enrollmentToken"],
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode != 0
    assert issued["enrollmentToken"] not in again.stdout + again.stderr
    assert issued["enrollmentToken"] not in live_board.log.read_text()
