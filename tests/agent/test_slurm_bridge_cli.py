"""`gua-agent slurm-bridge --once` as cron or a test runs it: a real squeue stand-in (a
script printing the capture), a real HTTP board stand-in, exit codes, the token."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from agent import slurm_squeue
from agent.cli import main
from agent.slurm_bridge import run_squeue
from agent.slurm_squeue import SqueueError
from tests.agent.fakes import FakeBoard, Reply

DATA = Path(__file__).resolve().parents[1] / "slurm" / "data"
TOKEN = "gua_pat_cli-secret-abcdef"


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake-squeue"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run_once(board: FakeBoard, tmp_path: Path, squeue: Path, *extra: str) -> int:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    return main(
        [
            "slurm-bridge", "--once", "--server-url", board.url, "--workspace", "acme",
            "--token-file", str(token), "--state-dir", str(tmp_path / "state"),
            "--squeue", str(squeue), *extra,
        ]
    )  # fmt: skip


@pytest.mark.usefixtures("agent_logging")
def test_once_posts_and_exits_0(board: FakeBoard, tmp_path: Path) -> None:
    squeue = script(tmp_path, f"cat {DATA / 'squeue-v0.0.41.json'}")
    assert run_once(board, tmp_path, squeue) == 0
    [request] = board.received
    assert request.path == "/api/v1/workspaces/acme/jobs"
    assert len(request.json["jobs"]) == 5
    assert run_once(board, tmp_path, squeue) == 0
    assert len(board.received) == 1  # the state dir remembers what was sent


@pytest.mark.usefixtures("agent_logging")
def test_once_with_the_board_down_exits_75_and_keeps_the_records(
    board: FakeBoard, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    board.default = Reply(500, {"detail": f"oops {TOKEN}"})
    squeue = script(tmp_path, f"cat {DATA / 'squeue.json'}")
    assert run_once(board, tmp_path, squeue) == 75
    board.default = Reply(202, {"accepted": 5})
    assert run_once(board, tmp_path, squeue) == 0
    assert len(board.received[-1].json["jobs"]) == 5
    err = capfd.readouterr().err
    assert "did not take the jobs" in err
    assert TOKEN not in err


@pytest.mark.usefixtures("agent_logging")
def test_once_with_squeue_failing_exits_1(board: FakeBoard, tmp_path: Path) -> None:
    squeue = script(tmp_path, "echo 'slurm_load_jobs error: Unable to contact' >&2; exit 1")
    assert run_once(board, tmp_path, squeue) == 1
    assert board.received == []


@pytest.mark.usefixtures("agent_logging")
def test_the_token_comes_from_the_environment_or_is_refused(
    board: FakeBoard, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    squeue = script(tmp_path, f"cat {DATA / 'squeue.json'}")
    argv = ["slurm-bridge", "--once", "--server-url", board.url, "--workspace", "a b",
            "--state-dir", str(tmp_path / "s"), "--squeue", str(squeue)]  # fmt: skip
    monkeypatch.delenv("GUA_BRIDGE_TOKEN", raising=False)
    assert main(argv) == 4
    monkeypatch.setenv("GUA_BRIDGE_TOKEN", "bad token with spaces")
    assert main(argv) == 4
    monkeypatch.setenv("GUA_BRIDGE_TOKEN", TOKEN)
    assert main(argv) == 0
    assert board.received[0].path == "/api/v1/workspaces/a%20b/jobs"
    assert board.received[0].headers["authorization"] == f"Bearer {TOKEN}"


def test_squeue_output_over_the_cap_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agent.slurm_bridge.MAX_OUTPUT_BYTES", 1000)
    monkeypatch.setattr(slurm_squeue, "MAX_OUTPUT_BYTES", 1000)
    squeue = script(tmp_path, "yes '{}'")  # endless
    with pytest.raises(SqueueError, match="refused"):
        run_squeue([str(squeue)], timeout=60)


def test_a_hung_squeue_is_killed(tmp_path: Path) -> None:
    squeue = script(tmp_path, "exec sleep 600")
    with pytest.raises(SqueueError, match="killed after the timeout"):
        run_squeue([str(squeue)], timeout=0.5)


def test_squeue_missing(tmp_path: Path) -> None:
    with pytest.raises(SqueueError, match="cannot run"):
        run_squeue([str(tmp_path / "nope")], timeout=5)


def test_arguments_reach_squeue(tmp_path: Path) -> None:
    squeue = script(tmp_path, '[ "$*" = "--all --json" ] && echo \'{"jobs": []}\'')
    assert run_squeue([str(squeue), "--all", "--json"], timeout=30).jobs == []
