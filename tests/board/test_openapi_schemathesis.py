"""schemathesis against a served board: the board answers as its OpenAPI says (issue 27).

`st run` with every default check, in the examples, coverage, fuzzing and stateful phases,
against `gua-board serve` on a real PostgreSQL, with a workspace that holds data (hosts,
a push, a booking, members) and bearer tokens for both schemes. What it is told (a fixed
workspace and host, spare credentials for the operations that revoke, the rules no JSON
Schema can state) is in schemathesis.toml beside this file, each with its reason; no
operation is left out. Bounded to a few examples an operation, deterministic, so the run
takes a couple of minutes on a slow two-core machine.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.ops.fleet import enroll, make_fleet, observation, push
from tests.support.live import BIN, LiveBoard, start_board, stop_board

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "schemathesis.toml"
# Generous: the run takes about two minutes here; a slow machine gets many times that.
RUN_SECONDS = 900


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[LiveBoard]:
    board = start_board(database_url, tmp_path / "board")
    try:
        yield board
    finally:
        stop_board(board)


def _seed(board: LiveBoard) -> dict[str, str]:
    """A workspace with two hosts (one to stay, one for the fuzzer to revoke), a push, a
    booking, a spare member and a spare token; the run's settings as environment."""
    fleet = make_fleet(board, "lab")
    host = enroll(board, fleet, "gpu-01")
    spare_host = enroll(board, fleet, "gpu-02")
    pushed = push(board, host["agentToken"], observation())
    assert pushed.status_code == 202, pushed.text
    auth = fleet.auth()
    with board.client() as c:
        spare = c.post(
            "/api/v1/workspaces/lab/members",
            json={"email": "spare@lab.example", "role": "member"},
            headers=auth,
        )
        assert spare.status_code == 201, spare.text
        own = c.get("/api/v1/me/api-tokens", headers=auth).json()["apiTokens"]
        token = c.post("/api/v1/me/api-tokens", json={"name": "spare"}, headers=auth)
        assert token.status_code == 201, token.text
        gpus = c.get(f"/api/v1/workspaces/lab/hosts/{host['hostId']}", headers=auth).json()
        start = (datetime.now(UTC) + timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
        booked = c.post(
            "/api/v1/workspaces/lab/reservations",
            json={
                "hostId": host["hostId"],
                "gpuUuids": [gpus["gpus"][0]["uuid"]],
                "start": start.isoformat(),
                "end": (start + timedelta(hours=2)).isoformat(),
                "note": "schemathesis",
            },
            headers=auth,
        )
        assert booked.status_code == 201, booked.text
    return {
        "GUA_ST_SLUG": fleet.slug,
        "GUA_ST_HOST_ID": host["hostId"],
        "GUA_ST_API_TOKEN": fleet.admin_token,
        "GUA_ST_AGENT_TOKEN": host["agentToken"],
        "GUA_ST_ADMIN_EMAIL": fleet.email,
        "GUA_ST_TOKEN_PREFIX": own[0]["tokenPrefix"],
        "GUA_ST_SPARE_HOST_ID": spare_host["hostId"],
        "GUA_ST_SPARE_EMAIL": "spare@lab.example",
        "GUA_ST_SPARE_TOKEN_PREFIX": token.json()["tokenPrefix"],
    }


def test_schemathesis_finds_no_disagreement(served: LiveBoard, tmp_path: Path) -> None:
    run_env = {
        **served.env,
        **_seed(served),
        "SCHEMATHESIS_HOOKS": "tests.board.schemathesis_hooks",
        "PYTHONPATH": str(HERE.parents[1]),
    }
    command = [
        str(BIN / "st"),
        "--config-file",
        str(CONFIG),
        "run",
        f"{served.url}/openapi.json",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--seed",
        "27",
        "--request-timeout",
        "60",
        "--workers",
        "1",
        "--no-color",
    ]
    done = subprocess.run(
        command,
        env=run_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"schemathesis found disagreements:\n{output[-12000:]}"
    # Every operation of the schema was run (none filtered out).
    assert re.search(r"Operations:\s+(\d+) selected / \1 total", output), output[:2000]
    for secret in (run_env["GUA_ST_API_TOKEN"], run_env["GUA_ST_AGENT_TOKEN"]):
        assert secret not in served.log.read_text(errors="replace")
