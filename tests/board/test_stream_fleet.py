"""The fleet's live frames (`GET …/stream/fleet`, the fleet page's `/w/{slug}/fleet/stream`):
one frame per tick per workspace, encoded once, a keyframe for whoever joins or lags."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from board.stream.frames import CATCH_UP_TICKS, KEYFRAME_TICKS, FleetView, FleetViewer
from board.stream.hub import StreamHub
from board.stream.samples import Sample
from tests.board.answers import refused
from tests.board.builders import enroll, make_tenant
from tests.board.db import scalar
from tests.board.test_stream import AsgiStream, agent_socket, serve, util_message
from tests.web.helpers import sign_in

FLEET = "/api/v1/workspaces/{}/stream/fleet"


@dataclass
class HostState:
    uuids: list[str]
    utils: list[int] = field(default_factory=list)
    mems: list[int] = field(default_factory=list)
    ts: float = 0.0


class FleetModel:
    """What a viewer knows after applying frames, as the page's script does."""

    def __init__(self) -> None:
        self.table: dict[int, str] = {}
        self.hosts: dict[str, HostState] = {}
        self.frames = 0

    def apply(self, frame: dict[str, Any]) -> None:
        self.frames += 1
        if frame["key"]:
            self.table, self.hosts = {}, {}
        for index, host_id, uuids in frame["hosts"]:
            self.table[index] = host_id
            self.hosts[host_id] = HostState(list(uuids))
        for index, age_ms, utils, mems in frame["rows"]:
            state = self.hosts[self.table[index]]
            state.utils, state.mems = utils, mems
            state.ts = frame["t"] - age_ms / 1000


class FleetReader:
    """Reads one fleet stream in the background: its hello, then each frame, raw and parsed."""

    def __init__(self) -> None:
        self.frames: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.raws: list[str] = []  # every frame's data, as sent
        self.hello: dict[str, Any] | None = None
        self.status = 0
        self.opened = asyncio.Event()
        self.model = FleetModel()

    async def run(self, client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        async with client.stream("GET", url, headers=headers) as response:
            self.status = response.status_code
            self.opened.set()
            event = "message"
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event = line[len("event: ") :]
                elif line.startswith("data: "):
                    raw = line[len("data: ") :]
                    if event == "hello":
                        self.hello = json.loads(raw)
                    elif event == "frame":
                        self.raws.append(raw)
                        await self.frames.put((raw, json.loads(raw)))
                    event = "message"

    async def next_frame(self, timeout: float = 10) -> tuple[str, dict[str, Any]]:
        raw, frame = await asyncio.wait_for(self.frames.get(), timeout)
        self.model.apply(frame)
        return raw, frame

    async def until(self, done: Any, what: str, seconds: float = 30) -> None:
        """Applies frames until `done(model)` holds (a generous deadline)."""
        deadline = time.monotonic() + seconds
        while not done(self.model):
            assert time.monotonic() < deadline, f"gave up waiting: {what}"
            with contextlib.suppress(TimeoutError):
                await self.next_frame(timeout=1)

    async def frames_within(self, seconds: float) -> list[tuple[str, dict[str, Any]]]:
        """The frames that arrive in the next `seconds` (and any already waiting)."""
        got = []
        end = time.monotonic() + seconds
        with contextlib.suppress(TimeoutError):
            while (left := end - time.monotonic()) > 0 or not self.frames.empty():
                got.append(await self.next_frame(max(left, 0.01)))
        return got


@contextlib.asynccontextmanager
async def fleet_stream(
    base_url: str, path: str, headers: dict[str, str], cookies: Any = None
) -> AsyncIterator[FleetReader]:
    reader = FleetReader()
    async with httpx.AsyncClient(
        base_url=base_url, timeout=None, trust_env=False, cookies=cookies
    ) as client:
        task = asyncio.create_task(reader.run(client, path, headers))
        await asyncio.wait_for(reader.opened.wait(), 10)
        try:
            yield reader
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task


@contextlib.asynccontextmanager
async def streaming(base_url: str, token: str, uuids: tuple[str, ...], util: int) -> Any:
    """An agent sending one util message a second (as agents 1.6+ do) until the block ends;
    the ts of every message it sent."""
    sent: list[float] = []

    async def run() -> None:
        async with agent_socket(base_url, token) as ws:
            while True:
                message = util_message(uuids, util)
                sent.append(json.loads(message)["ts"])
                await ws.send(message)
                await asyncio.sleep(1.0)

    task = asyncio.create_task(run())
    try:
        yield sent
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def served(app: Any) -> AsyncIterator[str]:
    async with serve(app) as url:
        assert await app.state.runtime.stream.wait_listening(10)
        yield url


def _has(*host_ids: str) -> Any:
    return lambda model: all(h in model.hosts and model.hosts[h].utils for h in host_ids)


async def test_frames_carry_this_workspaces_hosts_only(
    app: Any, client: httpx.AsyncClient, served: str
) -> None:
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    one = await enroll(client, acme, "one")
    two = await enroll(client, acme, "two")
    theirs = await enroll(client, other, "theirs")
    async with (
        fleet_stream(served, FLEET.format("acme"), acme.auth("member")) as mine,
        fleet_stream(served, FLEET.format("other"), other.auth("admin")) as stranger,
    ):
        assert (mine.status, stranger.status) == (200, 200)
        # A new viewer's first frame is a keyframe (of nothing yet).
        _, first = await mine.next_frame()
        assert first["key"] is True
        assert mine.hello == {"tickSeconds": 0.5, "keepSeconds": 300}
        async with (
            streaming(served, one["agentToken"], ("GPU-0", "GPU-1"), 80) as sent_one,
            streaming(served, two["agentToken"], ("GPU-A",), 30),
            streaming(served, theirs["agentToken"], ("GPU-Z",), 55),
        ):
            await mine.until(_has(one["hostId"], two["hostId"]), "acme's hosts in its frames")
            await stranger.until(_has(theirs["hostId"]), "other's host in its frames")
        state = mine.model.hosts[one["hostId"]]
        assert (state.uuids, state.utils, state.mems) == (
            ["GPU-0", "GPU-1"],
            [80, 80],
            [70000, 70000],
        )
        # The sample's own time (the agent's clock), to the millisecond.
        assert min(abs(state.ts - ts) for ts in sent_one) < 0.002
        assert mine.model.hosts[two["hostId"]].utils == [30]
        assert set(mine.model.hosts) == {one["hostId"], two["hostId"]}
        assert set(stranger.model.hosts) == {theirs["hostId"]}
        # Nothing of acme in any frame the other workspace got, nor the reverse.
        await asyncio.sleep(0.6)
        assert stranger.raws
        assert mine.raws
        for raw in stranger.raws:
            assert one["hostId"] not in raw
            assert two["hostId"] not in raw
            assert "GPU-0" not in raw
        for raw in mine.raws:
            assert theirs["hostId"] not in raw
            assert "GPU-Z" not in raw


async def test_a_new_viewer_starts_from_a_keyframe_and_viewers_share_the_bytes(
    app: Any, client: httpx.AsyncClient, served: str
) -> None:
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme, "one")
    path = FLEET.format("acme")
    async with (
        streaming(served, host["agentToken"], ("GPU-0",), 42),
        fleet_stream(served, path, acme.auth("member")) as early,
    ):
        await early.until(_has(host["hostId"]), "the host in the first viewer's frames")
        async with fleet_stream(served, path, acme.auth("admin")) as late:
            _, first = await late.next_frame()
            # Joined while the host streams: the whole table and its newest sample at once.
            assert first["key"] is True
            assert [h[1:] for h in first["hosts"]] == [[host["hostId"], ["GPU-0"]]]
            assert [r[2:] for r in first["rows"]] == [[[42], [70000]]]
            seen_early = {f["seq"]: raw for raw, f in await early.frames_within(2.5)}
            seen_late = {f["seq"]: raw for raw, f in await late.frames_within(0.5)}
        both = set(seen_early) & set(seen_late)
        assert both, "no frame of the same tick reached both viewers"
        # Deltas after the keyframe; one tick's frame is the same bytes for both.
        assert any(json.loads(seen_early[seq])["key"] is False for seq in both)
        assert all(seen_early[seq] == seen_late[seq] for seq in both)
        assert early.model.hosts[host["hostId"]].utils == [42]


async def test_each_tick_is_encoded_once_for_every_viewer(app: Any) -> None:
    """The hub hands every up-to-date viewer the very same bytes object."""
    hub: StreamHub = app.state.runtime.stream
    with hub.subscribe_fleet(7) as a, hub.subscribe_fleet(7) as b:
        view = hub.fleet_view(7)
        assert view is not None
        first = await asyncio.wait_for(a.get(), 10)
        assert first == await asyncio.wait_for(b.get(), 10)
        hub.deliver(Sample(7, "h1", time.time(), (("G", 5, 1),)))
        deadline = time.monotonic() + 10
        while a.pending is None or b.pending is None:
            assert time.monotonic() < deadline, "no frame after the sample"
            await asyncio.sleep(0.02)
        assert a.pending is b.pending
        assert b'"key":false' in a.pending
    assert hub.fleet_view(7) is None  # no viewer left: the workspace's view is gone


async def test_a_slow_viewer_holds_one_frame_and_skips_to_the_newest(app: Any) -> None:
    hub: StreamHub = app.state.runtime.stream
    with hub.subscribe_fleet(9) as slow:
        first = await asyncio.wait_for(slow.get(), 10)  # a keyframe, then it stops reading
        assert b'"key":true' in first
        for n in range(8):
            for h in range(50):
                hub.deliver(Sample(9, f"host-{h}", time.time(), (("G0", n, n), ("G1", n, n))))
            await asyncio.sleep(0.6)  # more than a tick: the frame is not taken in time
        # It never had more than one frame waiting (the board holds no backlog for it),
        # and what waits takes it from the frame it last took to the newest state.
        assert slow.lagged > 0
        frame = await asyncio.wait_for(slow.get(), 10)
        assert slow.pending is None
    data = json.loads(frame.split(b"data: ", 1)[1])
    model = FleetModel()
    model.apply(json.loads(first.split(b"data: ", 1)[1]))
    model.apply(data)
    assert data["key"] is False  # a catch-up: the hosts' table without what it already had
    assert len(model.hosts) == 50
    assert {tuple(h.utils) for h in model.hosts.values()} == {(7, 7)}


def _taker(view: FleetView, viewer: FleetViewer, model: FleetModel) -> Any:
    """Ticks the view; the viewer takes its frame (as the SSE loop does), applied."""

    def tick() -> dict[str, Any]:
        view.tick(now=1000.0 + view.seq)
        assert viewer.pending is not None
        frame = viewer.pending
        viewer.pending = None
        viewer.taken_seq = viewer.pending_seq
        assert frame.startswith(b"event: frame\ndata: ")
        assert frame.endswith(b"\n\n")
        data: dict[str, Any] = json.loads(frame.split(b"data: ", 1)[1])
        model.apply(data)
        return data

    return tick


def test_a_view_frames_what_changed_and_keeps_the_table() -> None:
    """Frames as a viewer gets them: deltas name hosts by index, a host's GPUs are sent
    again only when they change, parts of one NOTIFYed sample are joined."""
    view = FleetView(1, horizon=300)
    viewer = FleetViewer()
    view.viewers.add(viewer)
    model = FleetModel()
    tick = _taker(view, viewer, model)

    view.touch(Sample(1, "a", 999.5, (("A0", 10, 100), ("A1", 20, 200))))
    key = tick()
    assert key["key"] is True
    assert key["hosts"] == [[0, "a", ["A0", "A1"]]]
    assert key["rows"] == [[0, 500, [10, 20], [100, 200]]]
    view.touch(Sample(1, "b", 1000.9, (("B0", 1, 2),)))
    view.touch(Sample(1, "a", 1000.5, (("A0", 11, 101), ("A1", 21, 201))))
    view.touch(Sample(1, "a", 1000.25, (("A0", 99, 99), ("A1", 99, 99))))  # older: ignored
    delta = tick()
    assert delta["key"] is False
    assert delta["hosts"] == [[1, "b", ["B0"]]]  # a's table entry is not sent again
    assert sorted(delta["rows"]) == [[0, 500, [11, 21], [101, 201]], [1, 100, [1], [2]]]
    # Nothing changed: no frame at all.
    view.tick(now=1002.0)
    assert viewer.pending is None
    # One sample NOTIFYed in two parts: joined, and the host's GPUs sent again.
    view.touch(Sample(1, "b", 1002.5, (("B0", 3, 4),)))
    view.touch(Sample(1, "b", 1002.5, (("B1", 5, 6),)))
    joined = tick()
    assert joined["hosts"] == [[1, "b", ["B0", "B1"]]]
    assert model.hosts["b"].utils == [3, 5]
    assert model.hosts["a"].utils == [11, 21]
    # A host quiet for longer than the kept window leaves the table at the next check
    # (every KEYFRAME_TICKS ticks): the table is numbered afresh, everyone gets a keyframe.
    quiet = Sample(1, "c", 1003.0, (("C0", 9, 9),), received=time.monotonic() - 301)
    view.touch(quiet)
    assert tick()["hosts"] == [[2, "c", ["C0"]]]
    frames = []
    for _ in range(KEYFRAME_TICKS):
        view.touch(Sample(1, "a", 2000.0 + view.seq, (("A0", 1, 1), ("A1", 2, 2))))
        frames.append(tick())
        if frames[-1]["key"]:
            break
    assert [f["key"] for f in frames].count(True) == 1
    assert set(model.hosts) == {"a", "b"}
    assert frames[-1]["hosts"] == [[0, "a", ["A0", "A1"]], [1, "b", ["B0", "B1"]]]
    # With no host gone quiet, the check sends no keyframe.
    for _ in range(KEYFRAME_TICKS):
        view.touch(Sample(1, "a", 3000.0 + view.seq, (("A0", 1, 1), ("A1", 2, 2))))
        assert tick()["key"] is False


def test_a_lagging_viewer_is_caught_up_by_one_frame_shared_with_its_like() -> None:
    view = FleetView(1, horizon=300)
    prompt, slow, slower, late = FleetViewer(), FleetViewer(), FleetViewer(), FleetViewer()
    view.viewers.update((prompt, slow, slower))
    models = {v: FleetModel() for v in (prompt, slow, slower, late)}

    def take(viewer: FleetViewer) -> dict[str, Any]:
        frame = viewer.pending
        assert frame is not None
        viewer.pending = None
        viewer.taken_seq = viewer.pending_seq
        data: dict[str, Any] = json.loads(frame.split(b"data: ", 1)[1])
        models[viewer].apply(data)
        return data

    def sample(host: str, n: int) -> Sample:
        return Sample(1, host, 1000.0 + n, (("G", n % 100, n),))

    view.touch(sample("a", 0))
    view.tick(1000.0)
    for viewer in (prompt, slow, slower):
        assert take(viewer)["key"] is True
    for n in range(1, 4):  # three ticks; slow and slower take nothing
        view.touch(sample("a", n))
        if n == 2:
            view.touch(sample("b", n))  # new to the table meanwhile
        view.tick(1000.0 + n)
        take(prompt)
    assert (slow.lagged, slower.lagged) == (2, 2)
    assert slow.pending is slower.pending  # one catch-up for both: encoded once
    caught = take(slow)
    assert caught["key"] is False
    assert caught["hosts"] == [[1, "b", ["G"]]]
    assert models[slow].hosts["a"].utils == [3]
    assert models[slow].hosts["b"].utils == [2]
    # Too far behind to catch up from the ticks kept: a keyframe.
    view.viewers.add(late)
    for n in range(4, 4 + CATCH_UP_TICKS + 1):
        view.touch(sample("a", n))
        view.tick(1000.0 + n)
        take(prompt)
    assert take(slower)["key"] is True
    assert take(slow)["key"] is True
    assert take(late)["key"] is True  # joined: a keyframe, whatever came before
    newest = {h: (s.utils, s.ts) for h, s in models[prompt].hosts.items()}
    for viewer in (slow, slower, late):
        assert {h: (s.utils, s.ts) for h, s in models[viewer].hosts.items()} == newest


async def test_who_may_watch_the_fleet(app: Any, client: httpx.AsyncClient) -> None:
    acme = await make_tenant(app, "acme")
    await make_tenant(app, "other")
    url = FLEET.format("acme")
    assert "finance" in refused(await client.get(url, headers=acme.auth("finance")), 403)
    refused(await client.get(FLEET.format("other"), headers=acme.auth()), 404)
    refused(await client.get(url), 401)
    refused(await client.get(url, headers={"Authorization": "Bearer gua_pat_nope"}), 401)
    # Hostile inputs: none reaches a stream, each is a 4xx with a sentence.
    for hostile in ("x" * 8000, "acme%00", "..%2F..%2Fadmin", "ACME", "%E2%80%AE"):
        r = await client.get(FLEET.format(hostile), headers=acme.auth())
        assert 400 <= r.status_code < 500, (hostile, r.status_code)
        assert isinstance(r.json()["detail"], str)
    for junk in ("Bearer " + "A" * 10_000, "Basic Zm9vOmJhcg==", "Bearer \t"):
        r = await client.get(url, headers={"Authorization": junk})
        detail = refused(r, 400, 401)
        assert "AAAAAAAA" not in detail
    r = await client.post(url, headers=acme.auth())
    assert refused(r, 405)
    # The page's stream: signed-in members only; another workspace is a 404.
    assert (await client.get("/w/acme/fleet/stream")).status_code in (303, 401)
    assert (await sign_in(client, "finance@acme.example")).status_code == 303
    assert (await client.get("/w/acme/fleet/stream")).status_code == 403
    assert (await client.get("/w/other/fleet/stream")).status_code == 404
    # Finance's fleet page in the live view says so, and opens no stream.
    await enroll(client, acme, "one")
    page = await client.get("/w/acme/?view=live")
    assert page.status_code == 200
    assert "The live heat-map is for members and admins" in page.text
    assert "data-fleet-live" not in page.text


@pytest.mark.parametrize("ending", ["token revoked", "member removed"])
async def test_an_open_fleet_stream_ends_when_its_token_or_membership_does(
    app: Any, client: Any, ending: str
) -> None:
    acme = await make_tenant(app, "acme")
    issued = await client.post("/api/v1/me/api-tokens", json={}, headers=acme.auth("member"))
    assert issued.status_code == 201, issued.text
    token, prefix = issued.json()["apiToken"], issued.json()["tokenPrefix"]
    workspace_id = int(await scalar(app, "SELECT id FROM workspaces WHERE slug = 'acme'"))
    stream = AsgiStream(app, FLEET.format("acme"), token)
    hub: StreamHub = app.state.runtime.stream
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
        # Frames keep coming (a host streams); within a generous deadline the stream ends.
        deadline = time.monotonic() + 30
        while True:
            hub.deliver(Sample(workspace_id, "after", time.time(), (("G", 7, 1),)))
            try:
                if await stream.next_event(1.0) is None:
                    break
            except TimeoutError:
                pass
            assert time.monotonic() < deadline, f"the stream went on for 30 s after {ending}"
    finally:
        await stream.close()


def _slow_reader(base_url: str, path: str, token: str) -> socket.socket:
    """An HTTP client that asks for the stream and then reads nothing (a tiny window)."""
    host, port = base_url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    return sock


async def test_a_client_that_stops_reading_costs_one_frame(app: Any, served: str) -> None:
    """Over a real socket: once the client's window and the server's buffers are full, the
    board keeps one frame for it (the newest keyframe), never a growing queue."""
    acme = await make_tenant(app, "acme")
    workspace_id = int(await scalar(app, "SELECT id FROM workspaces WHERE slug = 'acme'"))
    hub: StreamHub = app.state.runtime.stream
    sock = _slow_reader(served, FLEET.format("acme"), acme.member_token)
    try:
        deadline = time.monotonic() + 60
        n = 0
        while True:
            view = hub.fleet_view(workspace_id)
            if view is not None:
                [viewer] = view.viewers
                if viewer.lagged >= 3:
                    break
            assert time.monotonic() < deadline, "the stalled client never lagged"
            n += 1
            # GPUs renamed every round (the longest UUIDs the agent API allows): each frame
            # carries the host table again, so the buffers on the way fill in seconds.
            uuids = [f"GPU-{n}-{g:0116d}"[:128] for g in range(64)]
            for h in range(100):
                gpus = tuple((u, n % 101, n) for u in uuids)
                hub.deliver(Sample(workspace_id, f"host-{h:03d}", time.time(), gpus))
            await asyncio.sleep(0.25)
        # One frame waits for it, whatever came since: the newest catch-up (or keyframe).
        assert isinstance(viewer.pending, bytes)
        assert viewer.pending.count(b"event: frame") == 1
    finally:
        sock.close()
    # Hung up: its view goes once the board notices (its next write fails).
    deadline = time.monotonic() + 30
    while hub.fleet_view(workspace_id) is not None:
        assert time.monotonic() < deadline, "the hung-up viewer was never let go"
        hub.deliver(Sample(workspace_id, "host-000", time.time(), (("G", 1, 1),)))
        await asyncio.sleep(0.25)
