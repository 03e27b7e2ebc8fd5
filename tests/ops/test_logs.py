"""The served board's real log output: one JSON object a line, request ids in and out,
the access log when asked for, never a secret."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ops.fleet import enroll, make_fleet, observation, push
from tests.support.live import LiveBoard, start_board, stop_board, wait_for


@pytest.fixture
def board(database_url: str, tmp_path: Path) -> Iterator[LiveBoard]:
    served = start_board(database_url, tmp_path / "board", {"GUA_BOARD_ACCESS_LOG": "true"})
    yield served
    stop_board(served)


def json_lines(board: LiveBoard) -> list[dict[str, Any]]:
    """Every line of the board's output, each of which must be one JSON object."""
    out = []
    for line in board.log_lines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"a log line that is not JSON: {line[:300]!r}") from None
    return out


def access_lines(board: LiveBoard, path: str) -> list[dict[str, Any]]:
    return [
        line
        for line in json_lines(board)
        if line.get("logger") == "board.access" and line.get("path") == path
    ]


def test_request_ids_travel_in_the_header_and_the_access_log(board: LiveBoard) -> None:
    with board.client() as c:
        given = c.get("/healthz", headers={"X-Request-ID": "trace-42.a:b_c"})
        insane = c.get("/healthz", headers={"X-Request-ID": "x" * 65})
        spaced = c.get("/healthz", headers={"X-Request-ID": "has space"})
        none = c.get("/healthz")
    assert given.headers["x-request-id"] == "trace-42.a:b_c"
    for r in (insane, spaced, none):
        assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"]), r.headers
    assert len({insane.headers["x-request-id"], none.headers["x-request-id"]}) == 2

    # The fixture's own readiness checks log /healthz lines too: wait for these four.
    ours = {r.headers["x-request-id"] for r in (given, insane, spaced, none)}

    def logged() -> list[dict[str, Any]] | None:
        lines = access_lines(board, "/healthz")
        return lines if ours <= {line["request_id"] for line in lines} else None

    lines = wait_for(logged, "access lines of the four requests")
    ids = [line["request_id"] for line in lines]
    assert "trace-42.a:b_c" in ids
    assert none.headers["x-request-id"] in ids
    first = next(line for line in lines if line["request_id"] == "trace-42.a:b_c")
    assert (first["method"], first["status"], first["level"]) == ("GET", 200, "info")
    assert isinstance(first["duration_ms"], float | int)
    assert first["client"] == "127.0.0.1"
    assert "x" * 65 not in board.log.read_text()


def test_no_secret_in_any_line(board: LiveBoard) -> None:
    fleet = make_fleet(board, "acme")
    host = enroll(board, fleet, "gpu-1")
    token = host["agentToken"]
    assert push(board, token, observation()).status_code == 202
    # A rejected push and a bad API call, with secrets in the headers and the query.
    assert push(board, token, {"schemaVersion": 1}).status_code == 422
    with board.client() as c:
        r = c.get(
            f"/api/v1/workspaces/acme/hosts?token={token}",
            headers={"Authorization": f"Bearer {fleet.admin_token}x"},
        )
        assert r.status_code == 401
    wait_for(
        lambda: access_lines(board, "/api/v1/workspaces/acme/hosts"), "the refused call logged"
    )
    text = board.log.read_text()
    for secret in (token, fleet.admin_token, fleet.password):
        assert secret not in text
    # Every line parses, and the path is logged without its query.
    assert all("token=" not in json.dumps(line) for line in json_lines(board))


def test_text_logs_when_asked(database_url: str, tmp_path: Path) -> None:
    served = start_board(
        database_url,
        tmp_path / "text",
        {"GUA_BOARD_LOG_FORMAT": "text", "GUA_BOARD_ACCESS_LOG": "true"},
    )
    try:
        with served.client() as c:
            c.get("/healthz", headers={"X-Request-ID": "plain-1"})
        wait_for(
            lambda: any("[plain-1]" in line for line in served.log_lines()), "a text access line"
        )
    finally:
        stop_board(served)
