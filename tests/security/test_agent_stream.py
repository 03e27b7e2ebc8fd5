"""The agent's live stream on the served board under frames the board cannot show or
must not take: oversized frames close the socket; hostile messages are dropped and
counted, the socket stays open and the next good message is shown; no frame breaks a
live view of the workspace.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.security.seed import (
    Host,
    Tenant,
    enroll,
    unique,
)
from tests.support.live import LiveBoard, measure_peaks

BOMB_PEAK_MIB = 200


def test_oversized_stream_frames_close_the_socket(board: LiveBoard, host: Host) -> None:
    """A frame far beyond any util message: the socket is closed, the worker stays small."""
    import asyncio

    import websockets

    async def send_big() -> str:
        url = board.url.replace("http", "ws", 1) + "/agent/v1/stream"
        async with websockets.connect(
            url, additional_headers=host.auth, open_timeout=30, max_size=None
        ) as ws:
            try:
                for _ in range(5):
                    await ws.send("x" * (32 * 1024 * 1024))
                await asyncio.wait_for(ws.wait_closed(), 30)
            except (websockets.ConnectionClosed, TimeoutError):
                pass
            return f"{ws.close_code}"

    with measure_peaks(board) as peaks:
        closed = asyncio.run(send_big())
    assert closed != "None", "a 32 MiB frame was taken in"
    assert peaks.worst_mib < BOMB_PEAK_MIB, f"a worker grew by {peaks.worst_mib:.0f} MiB"


def _util_frame(ts: float, gpus_: list[dict[str, Any]] | str) -> str:
    return json.dumps({"type": "util", "ts": ts, "gpus": gpus_})


def _card(uuid: str = "GPU-s-0", util: Any = 7, mem: Any = 1) -> dict[str, Any]:
    return {"deviceUuid": uuid, "utilPct": util, "memUsedMb": mem}


def test_stream_messages_the_board_cannot_show_are_dropped(board: LiveBoard, other: Tenant) -> None:
    """Each is dropped and counted, the socket stays open, and the next good message is
    shown: 65 cards, repeated UUIDs, out-of-range or mistyped numbers, odd `ts`."""
    import asyncio

    import websockets

    streamer = enroll(board, other, unique("streamer"))
    now = datetime.now(UTC).timestamp()
    bad = [
        _util_frame(now, [_card(f"GPU-{i}") for i in range(65)]),
        _util_frame(now, [_card(), _card()]),
        _util_frame(now, [_card(util=101)]),
        _util_frame(now, [_card(util=-1)]),
        _util_frame(now, [_card(util=7.5)]),
        _util_frame(now, [_card(util=True)]),
        _util_frame(now, [_card(mem=-1)]),
        _util_frame(now, [_card(mem=2**70)]),
        _util_frame(now, [_card(uuid="")]),
        _util_frame(now, [_card(uuid="u" * 129)]),
        _util_frame(0, [_card()]),
        _util_frame(now, "GPU-s-0"),
        json.dumps({"type": "util", "ts": str(now), "gpus": [_card()]}),
        json.dumps({"type": "UTIL", "ts": now, "gpus": [_card()]}),
        json.dumps({"type": "util", "ts": True, "gpus": [_card()]}),
        '{"type": "util", "ts": 1e400, "gpus": []}',
        '{"type": "util", "ts": -Infinity, "gpus": []}',
    ]
    good = _util_frame(now, [_card("GPU-s-good", 42, 4242)])
    url = board.url.replace("http", "ws", 1) + "/agent/v1/stream"

    async def send() -> None:
        async with websockets.connect(url, additional_headers=streamer.auth, open_timeout=30) as ws:
            for frame in [*bad, good]:
                await ws.send(frame)
                await asyncio.sleep(0.25)  # past the per-connection spacing
            await asyncio.sleep(0.5)

    asyncio.run(send())
    deadline = time.monotonic() + 60
    with board.client(other.admin.token) as c:
        while True:
            latest = board.call(c, "GET", f"/api/v1/workspaces/{other.slug}/stream/latest")
            assert latest.status_code == 200, latest
            hosts = {h["hostId"]: h for h in latest.json()["hosts"]}
            if streamer.host_id in hosts:
                break
            assert time.monotonic() < deadline, f"the good message never arrived: {latest}"
            time.sleep(0.5)
    shown = hosts[streamer.host_id]
    assert shown["gpus"] == [{"uuid": "GPU-s-good", "utilPct": 42, "memoryUsedMb": 4242}]
    assert shown["dropped"] == len(bad), shown


def _util(ts: float, uuid: str = "GPU-live-0") -> str:
    return json.dumps(
        {"type": "util", "ts": ts, "gpus": [{"deviceUuid": uuid, "utilPct": 7, "memUsedMb": 1}]}
    )


HOSTILE_FRAMES: list[str | bytes] = [
    "not json",
    '{"type": "util", "ts": NaN, "gpus": []}',
    '{"type": "util", "ts": Infinity, "gpus": []}',
    _util(1e12),  # year 33658: no date for it
    _util(1e308),
    _util(-1.0),
    _util(datetime.now(UTC).timestamp(), "<b id=hunt>"),
    '{"type": "util", "ts": 1, "gpus": [' + "[" * 10_000 + "]" * 10_000 + "]}",
    '{"type": "util", "ts": 1, "ts": "x", "gpus": []}',
    b"\x00\xff binary",
    "x" * 70_000,
]


def test_hostile_stream_frames_break_no_live_view(board: LiveBoard) -> None:
    """Was a 500 on /stream/latest and a dead SSE stream for the whole workspace: a util
    message with ts 1e12 (a date past year 9999) was kept, and no page could show it."""
    import asyncio

    import websockets

    from tests.security.seed import make_tenant

    tenant = make_tenant(board, "stream")
    noisy = enroll(board, tenant, unique("noisy"))
    quiet = enroll(board, tenant, unique("quiet"))
    url = board.url.replace("http", "ws", 1) + "/agent/v1/stream"

    async def send(host: Host, frames: list[str | bytes]) -> None:
        async with websockets.connect(url, additional_headers=host.auth, open_timeout=30) as ws:
            for frame in frames:
                await ws.send(frame)
                await asyncio.sleep(0.25)  # past the board's per-host spacing

    asyncio.run(send(noisy, HOSTILE_FRAMES))
    asyncio.run(send(quiet, [_util(datetime.now(UTC).timestamp())]))
    base = f"/api/v1/workspaces/{tenant.slug}/stream"
    deadline = datetime.now(UTC) + timedelta(seconds=60)
    with board.client(tenant.admin.token) as c:
        while True:
            latest = board.call(c, "GET", f"{base}/latest")
            assert latest.status_code == 200, latest
            hosts = {h["hostId"]: h for h in latest.json()["hosts"]}
            if quiet.host_id in hosts:
                break
            assert datetime.now(UTC) < deadline, f"the good sample never arrived: {latest}"
    # The SSE stream replays what the process kept: it reaches the good sample alive.
    seen = b""
    with (
        httpx.Client(
            base_url=board.url,
            headers={"Authorization": f"Bearer {tenant.admin.token}"},
            timeout=60,
        ) as c,
        c.stream("GET", base) as events,
    ):
        assert events.status_code == 200, events
        for chunk in events.iter_bytes():
            seen += chunk
            if quiet.host_id.encode() in seen:
                break
    assert seen.startswith(b"event: hello"), seen[:200]
    assert quiet.host_id.encode() in seen, f"the stream ended early: {seen[-300:]!r}"
    for sample in hosts.values():
        assert sample["ts"] <= 253_402_300_799, sample
        datetime.fromisoformat(sample["at"])
