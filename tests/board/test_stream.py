"""The live stream: an agent's WebSocket in, Server-Sent Events out, per workspace only."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import uvicorn
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from board.stream.hub import StreamHub
from board.stream.samples import Sample
from tests.board.answers import refused
from tests.board.builders import Tenant, enroll, make_tenant, spellings
from tests.board.db import scalar
from tests.support.ports import free_port
from tests.web.helpers import sign_in


def util_message(uuids: tuple[str, ...] = ("GPU-0", "GPU-1"), util: int = 2) -> str:
    """What agent 1.8.0 sends once a second (ws_client.util_message)."""
    return json.dumps(
        {
            "type": "util",
            "ts": time.time(),
            "gpus": [{"deviceUuid": u, "utilPct": util, "memUsedMb": 70000} for u in uuids],
        }
    )


class SseReader:
    """Reads one SSE response in the background; events land in a queue."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.status = 0
        self.opened = asyncio.Event()

    async def run(self, client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        async with client.stream("GET", url, headers=headers) as response:
            self.status = response.status_code
            self.opened.set()
            event = "message"
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event = line[len("event: ") :]
                elif line.startswith("data: "):
                    await self.events.put((event, json.loads(line[len("data: ") :])))
                    event = "message"

    async def next_util(self, timeout: float = 10) -> dict[str, Any]:
        while True:
            event, data = await asyncio.wait_for(self.events.get(), timeout)
            if event == "util":
                return data

    async def utils_within(self, seconds: float) -> list[dict[str, Any]]:
        found = []
        with contextlib.suppress(TimeoutError):
            while True:
                found.append(await self.next_util(seconds))
        return found


@contextlib.asynccontextmanager
async def sse(base_url: str, path: str, headers: dict[str, str]) -> AsyncIterator[SseReader]:
    reader = SseReader()
    async with httpx.AsyncClient(base_url=base_url, timeout=None, trust_env=False) as client:
        task = asyncio.create_task(reader.run(client, path, headers))
        await asyncio.wait_for(reader.opened.wait(), 10)
        try:
            yield reader
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task


def agent_socket(base_url: str, token: str | None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    ws_url = base_url.replace("http://", "ws://") + "/agent/v1/stream"
    return connect(ws_url, additional_headers=headers, proxy=None, open_timeout=10)


async def send_spaced(ws: ClientConnection, messages: list[str | bytes]) -> None:
    for message in messages:
        await ws.send(message)
        await asyncio.sleep(0.25)  # the agent sends one a second; the board drops floods


@contextlib.asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """An app whose lifespan already runs, on a real loopback port (for WebSockets)."""
    port = free_port()
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


@pytest.fixture
async def served(app: Any) -> AsyncIterator[str]:
    """The test's app (lifespan already running) on a real loopback port."""
    async with serve(app) as url:
        assert await app.state.runtime.stream.wait_listening(10)
        yield url


async def test_samples_reach_subscribers_of_the_same_workspace_only(
    app: Any, client: httpx.AsyncClient, served: str
) -> None:
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    host = await enroll(client, acme, "gpu-01")
    await enroll(client, other, "gpu-99")
    stream = "/api/v1/workspaces/{}/stream"
    async with (
        sse(served, stream.format("acme"), acme.auth("member")) as mine,
        sse(served, stream.format("other"), other.auth("admin")) as theirs,
    ):
        assert (mine.status, theirs.status) == (200, 200)
        async with agent_socket(served, host["agentToken"]) as ws:
            await send_spaced(
                ws,
                [
                    util_message(util=80),
                    "not json",
                    b"\x00binary",
                    json.dumps({"type": "util", "ts": "soon", "gpus": []}),
                    util_message(util=3),
                ],
            )
            first = await mine.next_util()
            second = await mine.next_util()
        assert first["hostId"] == host["hostId"]
        assert [g["utilPct"] for g in first["gpus"]] == [80, 80]
        assert first["gpus"][0] == {"uuid": "GPU-0", "utilPct": 80, "memoryUsedMb": 70000}
        # Bad messages were dropped and counted; the connection stayed up.
        assert (second["gpus"][0]["utilPct"], second["dropped"]) == (3, 3)
        assert await theirs.utils_within(1.0) == []


async def test_a_new_page_gets_the_recent_minutes_first(
    app: Any, client: httpx.AsyncClient, served: str
) -> None:
    acme = await make_tenant(app, "acme")
    one = await enroll(client, acme, "one")
    two = await enroll(client, acme, "two")
    for host in (one, two):
        async with agent_socket(served, host["agentToken"]) as ws:
            await send_spaced(ws, [util_message(), util_message()])
    await asyncio.sleep(0.5)
    path = f"/api/v1/workspaces/acme/stream?hostId={two['hostId']}"
    async with sse(served, path, acme.auth()) as page:
        replayed = [await page.next_util(), await page.next_util()]
        assert {e["hostId"] for e in replayed} == {two["hostId"]}
        assert await page.utils_within(0.5) == []
    latest = await client.get("/api/v1/workspaces/acme/stream/latest", headers=acme.auth())
    assert {h["hostId"] for h in latest.json()["hosts"]} == {one["hostId"], two["hostId"]}


async def test_bad_token_is_refused_at_the_upgrade(
    app: Any, client: httpx.AsyncClient, served: str
) -> None:
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme)
    revoked = await enroll(client, acme, "old")
    r = await client.post(
        f"/api/v1/workspaces/acme/hosts/{revoked['hostId']}/revoke", headers=acme.auth()
    )
    assert r.status_code == 200
    for token in (None, "gua_agent_unknown", acme.admin_token, revoked["agentToken"]):
        with pytest.raises(InvalidStatus) as refused:
            async with agent_socket(served, token):
                pass
        assert refused.value.response.status_code == 401
        assert isinstance(json.loads(refused.value.response.body)["detail"], str)
    async with agent_socket(served, host["agentToken"]) as ws:
        await ws.send(util_message())


async def test_who_may_watch(app: Any, client: httpx.AsyncClient) -> None:
    acme = await make_tenant(app, "acme")
    await make_tenant(app, "other")
    r = await client.get("/api/v1/workspaces/acme/stream", headers=acme.auth("finance"))
    assert r.status_code == 403
    r = await client.get("/api/v1/workspaces/other/stream", headers=acme.auth())
    assert r.status_code == 404
    r = await client.get("/api/v1/workspaces/acme/stream")
    assert r.status_code == 401


def test_notify_payloads_fit() -> None:
    from board.stream.samples import MAX_PAYLOAD, Sample

    gpus = tuple((f"GPU-{i:0124d}", 100, 2**31 - 1) for i in range(64))  # longest allowed
    sample = Sample(1, "h" * 36, time.time(), gpus, 5)
    payloads = sample.payloads()
    assert len(payloads) > 1
    assert all(len(p.encode()) <= MAX_PAYLOAD for p in payloads)
    back = [Sample.from_payload(p) for p in payloads]
    assert sum(len(s.gpus) for s in back if s) == 64


def test_kept_samples_come_back_as_they_arrived() -> None:
    """The history a page that opens replays is kept packed (samples.HostHistory)."""
    from board.stream.samples import HostHistory

    history = HostHistory("h", most=5)
    sent = [
        Sample(1, "h", 100.0 + n, (("GPU-a", n, 2**31 - 1), ("GPU-b", 100, 0)), n, 50.0 + n)
        for n in range(4)
    ]
    # New GPUs mid-way, then none at all.
    sent.append(Sample(1, "h", 105.5, (("GPU-c", 7, 70),), 9, 55.0))
    sent.append(Sample(1, "h", 106.0, (), 9, 56.0))
    for sample in sent:
        history.append(sample)
    back = list(history.samples(1))
    assert back == sent[1:]  # at most 5, the oldest gone
    assert [s.received for s in back] == [s.received for s in sent[1:]]
    assert history.newest is sent[-1]
    history.expire(54.5)
    assert [s.ts for s in history.samples(1)] == [105.5, 106.0]
    history.expire(60.0)
    assert len(history) == 0
    assert history.newest is None


def test_a_notified_sample_out_of_range_is_dropped() -> None:
    """Only the board NOTIFYs the channel, but whoever holds the database's credentials
    may: a figure the agent API would refuse is no sample."""
    for util, memory in ((101, 1), (-1, 1), (5, -1), (5, 2**31)):
        payload = json.dumps({"w": 1, "h": "x", "t": 1.0, "g": [["G", util, memory]], "d": 0})
        assert Sample.from_payload(payload) is None, (util, memory)
    fine = json.dumps({"w": 1, "h": "x", "t": 1.0, "g": [["G", 100, 2**31 - 1]], "d": 0})
    assert Sample.from_payload(fine) is not None


async def test_revoking_the_host_closes_its_socket_at_once(
    app: Any, client: httpx.AsyncClient, served: str
) -> None:
    """Not at the next minute's re-check: the revocation itself closes it (code 1008)."""
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme)
    async with agent_socket(served, host["agentToken"]) as ws:
        await ws.send(util_message())
        r = await client.post(
            f"/api/v1/workspaces/acme/hosts/{host['hostId']}/revoke", headers=acme.auth()
        )
        assert r.status_code == 200
        await asyncio.wait_for(ws.wait_closed(), 10)
        assert (ws.close_code, ws.close_reason) == (1008, "host revoked")


async def test_latest_shape_and_who_may_read_it(
    app: Any, client: httpx.AsyncClient, served: str
) -> None:
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme)
    url = "/api/v1/workspaces/acme/stream/latest"
    async with agent_socket(served, host["agentToken"]) as ws:
        await ws.send(util_message())
        deadline = time.monotonic() + 10
        while True:
            r = await client.get(url, headers=acme.auth("member"))
            assert r.status_code == 200, r.text
            if r.json()["hosts"] or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    body = r.json()
    assert list(body) == ["keepSeconds", "hosts"]
    assert '"keepSeconds":300,' in r.text  # the configured int, as it was
    [latest] = body["hosts"]
    assert list(latest) == ["hostId", "ts", "at", "gpus", "dropped", "secondsAgo"]
    assert latest["hostId"] == host["hostId"]
    assert latest["at"].endswith("+00:00")
    assert [list(g) for g in latest["gpus"]] == [["uuid", "utilPct", "memoryUsedMb"]] * 2
    assert (await client.get(url, headers=acme.auth("finance"))).status_code == 403
    assert (await client.get(url, headers=acme.auth("admin"))).status_code == 200


class AsgiStream:
    """One GET to the app as a raw ASGI call, its body chunks as they are sent (httpx's
    ASGI transport holds a streaming answer until it ends)."""

    def __init__(self, app: Any, path: str, token: str) -> None:
        self.chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.gone = asyncio.Event()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"board.test"),
                (b"authorization", f"Bearer {token}".encode()),
            ],
            "client": ("127.0.0.1", 50000),
            "server": ("board.test", 80),
            "state": {},
        }
        self.task = asyncio.create_task(app(scope, self._receive, self._send))

    async def _receive(self) -> dict[str, Any]:
        if not hasattr(self, "_sent_request"):
            self._sent_request = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            await self.chunks.put(message.get("body", b""))
            if not message.get("more_body", False):
                await self.chunks.put(None)

    async def next_event(self, seconds: float) -> bytes | None:
        """The next chunk that is not a keep-alive comment; None when the stream ended."""
        async with asyncio.timeout(seconds):
            while True:
                chunk = await self.chunks.get()
                if chunk is None or not chunk.startswith(b":"):
                    return chunk

    async def close(self) -> None:
        self.gone.set()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task


@pytest.mark.parametrize("ending", ["token revoked", "member removed"])
async def test_an_open_live_stream_ends_when_its_token_or_membership_does(
    app: Any, client: Any, ending: str
) -> None:
    """docs/security.md: a person whose token leaked must not keep using it after
    revocation or removal. A live stream opened with the token kept streaming samples
    (found here; fixed in board/stream by the stream's owner: re-checked while open)."""
    acme = await make_tenant(app, "acme")
    issued = await client.post("/api/v1/me/api-tokens", json={}, headers=acme.auth("member"))
    assert issued.status_code == 201, issued.text
    token, prefix = issued.json()["apiToken"], issued.json()["tokenPrefix"]
    workspace_id = await scalar(app, "SELECT id FROM workspaces WHERE slug = 'acme'")
    stream = AsgiStream(app, "/api/v1/workspaces/acme/stream", token)
    try:
        hello = await stream.next_event(30)
        assert hello is not None
        assert hello.startswith(b"event: hello"), hello
        if ending == "token revoked":
            r = await client.delete(
                f"/api/v1/me/api-tokens/{prefix}", headers={"Authorization": f"Bearer {token}"}
            )
        else:
            r = await client.delete(
                "/api/v1/workspaces/acme/members/member@acme.example", headers=acme.auth()
            )
        assert r.status_code in (200, 204), r.text
        refused = await client.get(
            "/api/v1/workspaces/acme/stream/latest", headers={"Authorization": f"Bearer {token}"}
        )
        assert refused.status_code == 401
        hub: StreamHub = app.state.runtime.stream
        # A stream may re-check its viewer every few seconds (the host page's does, every
        # 5 s): samples keep coming, and within a generous deadline the stream must end.
        deadline = time.monotonic() + 30
        while True:
            sample = Sample(int(workspace_id), "after-revocation", time.time(), (("G", 7, 1),))
            hub.deliver(sample)
            try:
                if await stream.next_event(1.0) is None:
                    break  # ended
            except TimeoutError:
                pass
            assert time.monotonic() < deadline, f"the stream went on for 30 s after {ending}"
    finally:
        await stream.close()


async def streamed_lately(client: httpx.AsyncClient, tenant: Tenant, host_id: str) -> None:
    """Waits (generously) until the hub keeps a sample of the host."""
    url = f"/api/v1/workspaces/{tenant.slug}/stream/latest"
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        r = await client.get(url, headers=tenant.auth())
        assert r.status_code == 200, r.text
        if host_id in {h["hostId"] for h in r.json()["hosts"]}:
            return
        assert asyncio.get_running_loop().time() < deadline, "the samples never arrived"
        await asyncio.sleep(0.05)


NOT_HOST_IDS = (
    "",
    "not-a-host",
    "x" * 65,
    "x" * 8000,
    "0" * 31,
    "0" * 33,
    "gua_agent_0123abcd_" + "A" * 40,
)


async def test_a_stream_hostid_that_is_no_uuid_is_422(app: Any, client: httpx.AsyncClient) -> None:
    """Was a 200 stream of nothing, for a hostId of any length."""
    tenant = await make_tenant(app, "acme")
    url = f"/api/v1/workspaces/{tenant.slug}/stream"
    for value in NOT_HOST_IDS:
        r = await client.get(url, params={"hostId": value}, headers=tenant.auth("member"))
        detail = refused(r, 422)
        assert "hostId" in detail
        if value:
            assert value[:8] not in detail  # not echoed: it may be a pasted token
    # A NUL in the URL is refused before any route (board.edge).
    refused(await client.get(f"{url}?hostId=%00", headers=tenant.auth("member")), 400)


async def test_a_stream_hostid_in_any_spelling_matches_its_host(
    app: Any, client: httpx.AsyncClient, served: str
) -> None:
    """Was a stream of nothing for an upper-case, braced, urn: or unhyphenated id."""
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    mine = await enroll(client, acme, "mine")
    theirs = await enroll(client, other, "theirs")
    for host in (mine, theirs):
        async with agent_socket(served, host["agentToken"]) as ws:
            await send_spaced(ws, [util_message(), util_message()])
    for tenant, host in ((acme, mine), (other, theirs)):
        await streamed_lately(client, tenant, host["hostId"])
    path = f"/api/v1/workspaces/{acme.slug}/stream?hostId="
    for spelled in [mine["hostId"], *spellings(mine["hostId"])]:
        async with sse(served, path + quote(spelled, safe=""), acme.auth("member")) as page:
            assert page.status == 200
            first = await page.next_util()
            assert first["hostId"] == mine["hostId"]
    # Another workspace's host, or none, in any spelling: a 404, as on the host page.
    for spelled in [theirs["hostId"], *spellings(theirs["hostId"]), str(uuid.uuid4())]:
        r = await client.get(path + quote(spelled, safe=""), headers=acme.auth("member"))
        assert "No such host" in refused(r, 404)
        assert "theirs" not in r.text
    # The host page's stream of it is a 404, in any spelling.
    assert (await sign_in(client, "member@acme.example")).status_code == 303
    for spelled in [theirs["hostId"], *spellings(theirs["hostId"])]:
        r = await client.get(f"/w/{acme.slug}/hosts/{quote(spelled, safe='')}/stream")
        assert r.status_code == 404, r.text[:300]
        assert "theirs" not in r.text
