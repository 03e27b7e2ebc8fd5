"""Two board processes on one database deliver each other's agents' samples (and frame them)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.board.builders import enroll, make_tenant
from tests.board.test_stream import SseReader, agent_socket, sse, util_message
from tests.board.test_stream_fleet import fleet_stream, streaming
from tests.support.live import LiveBoard, start_board, stop_board


@pytest.fixture
def two_boards(database_url: str, tmp_path: Path) -> Iterator[tuple[LiveBoard, LiveBoard]]:
    first = start_board(database_url, tmp_path / "one")
    try:
        second = start_board(database_url, tmp_path / "two")
    except BaseException:
        stop_board(first)
        raise
    yield first, second
    stop_board(second)
    stop_board(first)


async def _arrives(
    board: LiveBoard, host: dict[str, Any], page: SseReader, util: int
) -> dict[str, Any]:
    """Keep streaming (as the agent does) until the page sees a sample of this host."""
    async with agent_socket(board.url, host["agentToken"]) as ws:
        for _ in range(40):
            await ws.send(util_message(util=util))
            try:
                got = await page.next_util(timeout=0.5)
            except TimeoutError:
                continue
            if got["hostId"] == host["hostId"]:
                return got
    raise AssertionError("the sample never reached the other process's subscriber")


async def test_each_process_delivers_to_the_others_subscribers(
    app: Any, client: httpx.AsyncClient, two_boards: tuple[LiveBoard, LiveBoard]
) -> None:
    one, two = two_boards
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    on_one = await enroll(client, acme, "streams-to-one")
    on_two = await enroll(client, acme, "streams-to-two")
    path = "/api/v1/workspaces/{}/stream"
    async with (
        sse(two.url, path.format("acme"), acme.auth("member")) as page_on_two,
        sse(one.url, path.format("acme"), acme.auth("member")) as page_on_one,
        sse(two.url, path.format("other"), other.auth("member")) as stranger_on_two,
    ):
        got = await _arrives(one, on_one, page_on_two, 61)
        assert (got["hostId"], got["gpus"][0]["utilPct"]) == (on_one["hostId"], 61)
        got = await _arrives(two, on_two, page_on_one, 62)
        assert (got["hostId"], got["gpus"][0]["utilPct"]) == (on_two["hostId"], 62)
        await asyncio.sleep(0.5)
        assert await stranger_on_two.utils_within(0.5) == []


async def test_each_process_frames_the_others_agents(
    app: Any, client: httpx.AsyncClient, two_boards: tuple[LiveBoard, LiveBoard]
) -> None:
    """The fleet's frames are built in each process from what its listener heard."""
    one, two = two_boards
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme, "streams-to-one")
    path = "/api/v1/workspaces/acme/stream/fleet"
    async with fleet_stream(two.url, path, acme.auth("member")) as page_on_two:
        async with streaming(one.url, host["agentToken"], ("GPU-0",), 63):
            await page_on_two.until(
                lambda model: (
                    host["hostId"] in model.hosts and model.hosts[host["hostId"]].utils == [63]
                ),
                "the other process's agent in this process's frames",
            )
