"""Our own agent streams utilization like the released one, to a real served board.

The board runs in the test's event loop on a loopback port (uvicorn); the agent is the
real `gua-agent run --fake` process (or its streamer on a thread), so the WebSocket,
the hub and the host page's Server-Sent Events are all the real ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from agent.config import AgentConfig, save_config
from agent.fake import FakeCollector
from agent.sender import Backoff
from agent.stream import UtilStreamer, stream_url, util_message
from tests.board.builders import enroll, make_tenant
from tests.board.test_stream import sse
from tests.support.ports import free_port
from tests.web.helpers import sign_in

ROOT = Path(__file__).resolve().parents[2]
FAKE_UUIDS = ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]


@contextlib.asynccontextmanager
async def serve_on(app: Any, port: int) -> AsyncIterator[str]:
    """The app (lifespan already running) on loopback `port` until the block ends."""
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 60
    while not server.started:
        assert not task.done(), "the test server stopped before it started"
        assert time.monotonic() < deadline, "the test server did not start"
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def until(condition: Any, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        await asyncio.sleep(0.05)


def test_stream_url_and_message_follow_the_contract() -> None:
    assert stream_url("https://board.example") == "wss://board.example/agent/v1/stream"
    assert stream_url("http://127.0.0.1:8000/") == "ws://127.0.0.1:8000/agent/v1/stream"
    readings = FakeCollector("h").utilization()
    assert [r.uuid for r in readings] == FAKE_UUIDS
    import json

    message = json.loads(util_message(readings, 1700000000.25))
    assert message["type"] == "util"
    assert message["ts"] == 1700000000.25
    assert set(message["gpus"][0]) == {"deviceUuid", "utilPct", "memUsedMb"}


async def test_the_host_pages_live_stream_sees_the_agents_samples(
    app: Any, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme, "fake-01")
    async with serve_on(app, free_port()) as base:
        assert await app.state.runtime.stream.wait_listening(10)
        config = tmp_path / "config.json"
        save_config(
            config,
            AgentConfig(base, host["hostId"], "fake-01", host["agentToken"], "gua_agent"),
        )
        agent = subprocess.Popen(
            [sys.executable, "-m", "agent", "run", "--fake", "--config", str(config)],
            cwd=ROOT,
            env={**os.environ, "GUA_AGENT_SPOOL_DIR": str(tmp_path / "spool")},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            async with httpx.AsyncClient(base_url=base, trust_env=False) as browser:
                r = await sign_in(browser, "member@acme.example")
                assert r.status_code in (200, 303), r.text
                path = f"/w/acme/hosts/{host['hostId']}/stream"
                async with sse(base, path, _cookie(browser)) as page:
                    assert page.status == 200
                    first = await page.next_util(timeout=30)
                    second = await page.next_util(timeout=30)
            assert first["hostId"] == host["hostId"]
            assert [g["uuid"] for g in first["gpus"]] == FAKE_UUIDS
            assert all(0 <= g["utilPct"] <= 100 for g in first["gpus"])
            assert second["ts"] > first["ts"]  # one message a second, not a replay
        finally:
            agent.send_signal(signal.SIGTERM)
            _, err = agent.communicate(timeout=30)
        assert agent.returncode == 0, err.decode()
        assert host["agentToken"] not in err.decode()


def _cookie(client: httpx.AsyncClient) -> dict[str, str]:
    return {"Cookie": "; ".join(f"{k}={v}" for k, v in client.cookies.items())}


async def test_the_agent_survives_the_board_going_away_and_comes_back(
    app: Any, client: httpx.AsyncClient
) -> None:
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme, "fake-02")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    streamer = UtilStreamer(
        base,
        host["agentToken"],
        FakeCollector("fake-02").utilization,
        every=0.3,
        connect_timeout=2.0,
        backoff=Backoff(base=0.1, cap=0.5),
    ).start()
    try:
        async with serve_on(app, port):
            assert await app.state.runtime.stream.wait_listening(10)
            await until(lambda: streamer.sent >= 2, "samples sent to the first board")
        # The board is gone: the streamer keeps trying and does not end.
        sent_before = streamer.sent
        await asyncio.sleep(1.0)
        assert streamer._thread.is_alive()
        async with serve_on(app, port):
            path = f"/api/v1/workspaces/acme/stream?hostId={host['hostId']}"
            async with sse(base, path, acme.auth("member")) as page:
                await until(lambda: streamer.connections >= 2, "a second connection")
                sample = await page.next_util(timeout=30)
                while sample["ts"] < time.time() - 5:  # skip the kept history
                    sample = await page.next_util(timeout=30)
        assert sample["hostId"] == host["hostId"]
        assert [g["uuid"] for g in sample["gpus"]] == FAKE_UUIDS
        assert streamer.sent > sent_before
    finally:
        streamer.stop()
    assert not streamer._thread.is_alive()


async def test_stopping_never_waits_on_a_board_that_does_not_answer() -> None:
    """A board that accepts TCP but never completes the upgrade: stop() still returns
    (the push loop's shutdown is never held up by the stream)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        streamer = UtilStreamer(
            f"http://127.0.0.1:{port}",
            "gua_agent_secret",
            FakeCollector("x").utilization,
            connect_timeout=1.0,
            backoff=Backoff(base=0.1, cap=0.2),
        ).start()
        await asyncio.sleep(0.5)
        await asyncio.to_thread(streamer.stop, 30.0)
    assert not streamer._thread.is_alive()
    assert streamer.sent == 0


def test_no_stream_flag_turns_it_off() -> None:
    from agent.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["run", "--fake"]).stream is True
    assert parser.parse_args(["run", "--fake", "--no-stream"]).stream is False
    with pytest.raises(SystemExit):
        parser.parse_args(["push-once", "--no-stream"])
