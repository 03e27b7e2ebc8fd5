"""No secret in the log even when an operator turns logging up to debug.

A second board process group (`serve --workers 2`, GUA_BOARD_LOG_LEVEL=debug) on the same
database serves the everyday calls of people and agents, each with its secret in a header
or a body; then its whole log is searched for token secrets and passwords.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import websockets

from tests.security.conftest import SETTINGS, World
from tests.security.seed import claim, issue_enrollment, observation, push
from tests.support.live import LiveBoard, start_board, stop_board
from tests.support.replies import SECRET


@pytest.fixture(scope="module")
def debug_board(
    board: LiveBoard, world: World, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveBoard]:
    settings = {
        **SETTINGS,
        "GUA_BOARD_LOG_LEVEL": "debug",
        "GUA_BOARD_SECRET_KEY": board.env["GUA_BOARD_SECRET_KEY"],
    }
    served = start_board(
        board.env["GUA_BOARD_DATABASE_URL"],
        tmp_path_factory.mktemp("debug-board"),
        settings,
        workers=2,
    )
    # Same secrets to look for as the main board's.
    served.handed_out = board.handed_out
    served.passwords = board.passwords
    try:
        yield served
    finally:
        stop_board(served)


def test_debug_log_holds_no_secret(debug_board: LiveBoard, world: World) -> None:
    b = debug_board
    a = world.a
    host = a.hosts[0]
    with b.client(a.admin.token) as c:
        assert b.call(c, "GET", f"/api/v1/workspaces/{a.slug}/hosts").status_code == 200
    assert push(b, host, observation()).status_code == 202
    with b.client(host.token) as c:
        assert b.call(c, "GET", "/agent/v1/archives").status_code == 200
    with b.signed_in(a.member.email, a.member.password) as c:
        assert b.call(c, "GET", "/account").status_code == 200
    claim(b, issue_enrollment(b, a), "debug-logged")

    async def stream() -> None:
        url = b.url.replace("http", "ws", 1) + "/agent/v1/stream"
        async with websockets.connect(url, additional_headers=host.auth, open_timeout=30) as ws:
            await ws.send(json.dumps({"type": "util", "ts": 1.0, "gpus": []}))

    asyncio.run(stream())
    text = b.log_text()
    lines = [line for line in text.splitlines() if SECRET.search(line)]
    shown = sorted({SECRET.sub(lambda m: m.group(0)[:18] + "…", line)[:160] for line in lines})
    found = bool(lines)  # (not the lines themselves: pytest would print the secrets)
    assert not found, "the debug log holds token secrets:\n" + "\n".join(shown)
    assert not b.leaks_in(text), b.leaks_in(text)
