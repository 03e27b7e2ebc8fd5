"""/metrics of `gua-board serve --workers 2`: every worker's counts add up, through a
directory made for this run and removed when the server stops."""

from __future__ import annotations

from pathlib import Path

from tests.ops.fleet import enroll, make_fleet, observation, push, sample_value
from tests.support.live import start_board, stop_board, wait_for
from tests.support.processes import children

PUSHES = 24


def metrics_dir_of(pid: int) -> str | None:
    for child in children(pid):
        try:
            env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in env:
            if item.startswith(b"PROMETHEUS_MULTIPROC_DIR="):
                return item.split(b"=", 1)[1].decode()
    return None


def test_counts_of_every_worker_add_up(database_url: str, tmp_path: Path) -> None:
    board = start_board(database_url, tmp_path / "board", workers=2)
    try:
        folder = wait_for(lambda: metrics_dir_of(board.process.pid), "the workers' metrics dir")
        assert Path(folder).is_dir()
        fleet = make_fleet(board, "acme")
        host = enroll(board, fleet, "gpu-1")
        for _ in range(PUSHES):  # each on a new connection: both workers take some
            assert push(board, host["agentToken"], observation()).status_code == 202
        assert push(board, "gua_agent_00000000_nope", observation()).status_code == 401
        text = board.metrics()
        assert sample_value(text, "gua_board_observations_accepted_total") == PUSHES
        assert (
            sample_value(text, "gua_board_observations_rejected_total", 'reason="unauthorized"')
            == 1
        )
        assert sample_value(text, "gua_board_hosts", 'freshness="never"') == 0
        # Every worker wrote its own files there.
        assert len({p.name.rsplit("_", 1)[-1] for p in Path(folder).glob("counter_*.db")}) >= 1
    finally:
        stop_board(board)
    assert not Path(folder).exists(), "the per-run metrics directory was left behind"
