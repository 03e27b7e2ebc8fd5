"""Revoking a host ends its agent's access at once, in every worker and on open sockets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable

import httpx
import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from tests.security.seed import (
    Host,
    Tenant,
    enroll,
    observation,
    push,
    unique,
)
from tests.support.live import LiveBoard
from tests.support.replies import Reply, refused

CLOSE_DEADLINE_S = 10.0
POLL_DEADLINE_S = 5.0


def _ws_url(board: LiveBoard) -> str:
    return board.url.replace("http", "ws", 1) + "/agent/v1/stream"


def _util() -> str:
    return json.dumps(
        {
            "type": "util",
            "ts": time.time(),
            "gpus": [{"deviceUuid": "GPU-0", "utilPct": 42, "memUsedMb": 100}],
        }
    )


async def _open_on_every_worker(board: LiveBoard, host: Host) -> list[tuple[ClientConnection, int]]:
    """Sockets of the host's agent until each worker holds at least one (at most 12)."""
    sockets: list[tuple[ClientConnection, int]] = []
    workers = set(board.worker_pids())
    while len(sockets) < 12 and not workers <= {w for _, w in sockets}:
        ws = await websockets.connect(_ws_url(board), additional_headers=host.auth, open_timeout=30)
        local_port = ws.transport.get_extra_info("sockname")[1]
        sockets.append((ws, board.worker_serving(local_port) or 0))
    return sockets


async def _keep_sending(ws: ClientConnection) -> None:
    with contextlib.suppress(websockets.ConnectionClosed):
        while True:
            await ws.send(_util())
            await asyncio.sleep(1)


def _revoke_api(board: LiveBoard, tenant: Tenant, host: Host) -> Reply:
    with board.client(tenant.admin.token) as c:
        return board.call(
            c, "POST", f"/api/v1/workspaces/{tenant.slug}/hosts/{host.host_id}/revoke"
        )


def _revoke_page(board: LiveBoard, tenant: Tenant, host: Host) -> Reply:
    with board.signed_in(tenant.admin.email, tenant.admin.password) as c:
        csrf = board.csrf(c, f"/w/{tenant.slug}/admin")
        return board.call(
            c,
            "POST",
            f"/w/{tenant.slug}/admin/hosts/{host.host_id}/revoke",
            data={"csrf_token": csrf},
        )


REVOKES: dict[str, Callable[[LiveBoard, Tenant, Host], Reply]] = {
    "api": _revoke_api,
    "page": _revoke_page,
}


@pytest.mark.parametrize("how", list(REVOKES))
def test_revoke_closes_open_sockets_in_every_worker(
    board: LiveBoard, scratch: Tenant, how: str
) -> None:
    host = enroll(board, scratch, unique(f"revoked-{how}"))

    async def scenario() -> tuple[list[int], dict[int, str]]:
        sockets = await _open_on_every_worker(board, host)
        senders = [asyncio.create_task(_keep_sending(ws)) for ws, _ in sockets]
        await asyncio.sleep(1.5)
        assert all(ws.close_code is None for ws, _ in sockets), "a socket closed before revoke"
        reply = await asyncio.to_thread(REVOKES[how], board, scratch, host)
        assert reply.status_code in (200, 303), reply
        still_open: dict[int, str] = {}
        for ws, worker in sockets:
            try:
                await asyncio.wait_for(ws.wait_closed(), CLOSE_DEADLINE_S)
            except TimeoutError:
                still_open[worker] = "open"
        for task in senders:
            task.cancel()
        for ws, _ in sockets:
            await ws.close()
        return [w for _, w in sockets], still_open

    workers, still_open = asyncio.run(scenario())
    assert len({w for w in workers if w}) >= 2, f"the sockets were not on two workers: {workers}"
    assert not still_open, (
        f"sockets on workers {sorted(still_open)} still open {CLOSE_DEADLINE_S} s after the "
        f"revoke (sockets were on workers {workers})"
    )


def _until_refused(send: Callable[[httpx.Client], Reply], board: LiveBoard) -> None:
    """The first refusal within the deadline (a revoke may take a moment to reach all)."""
    end = time.monotonic() + POLL_DEADLINE_S
    while True:
        with board.client() as c:
            if send(c).status_code == 401:
                return
        assert time.monotonic() < end, "the revoked token was not refused within the deadline"
        time.sleep(0.2)


def test_revoked_token_is_refused_everywhere(board: LiveBoard, scratch: Tenant) -> None:
    host = enroll(board, scratch, unique("revoked-token"))
    date = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400))

    def push_once(c: httpx.Client) -> Reply:
        return board.call(
            c,
            "POST",
            "/agent/v1/observations",
            content=json.dumps(observation()).encode(),
            headers={**host.auth, "Content-Type": "application/json"},
        )

    def list_archives(c: httpx.Client) -> Reply:
        return board.call(c, "GET", "/agent/v1/archives", headers=host.auth)

    def upload(c: httpx.Client) -> Reply:
        return board.call(
            c,
            "POST",
            f"/agent/v1/archives?date={date}&table=gpu_sample",
            content=b"\x1f\x8b",
            headers={**host.auth, "Content-Type": "application/gzip"},
        )

    def works(reply: Reply) -> None:
        assert reply.status_code in (200, 202), reply

    # Every worker has the token cached before the revoke.
    board.on_every_worker(push_once, works)
    board.on_every_worker(list_archives, works)
    assert _revoke_api(board, scratch, host).status_code == 200

    def refused(reply: Reply) -> None:
        assert reply.status_code == 401, f"worker {reply.worker} let a revoked host in: {reply}"
        reply.detail()

    for send in (push_once, list_archives, upload):
        _until_refused(send, board)
        seen = board.on_every_worker(send, refused)
        assert len(seen) >= 2, seen

    async def upgrade() -> str:
        try:
            async with websockets.connect(
                _ws_url(board), additional_headers=host.auth, open_timeout=30
            ):
                return "accepted"
        except websockets.InvalidStatus as exc:
            return str(exc.response.status_code)

    outcomes = {asyncio.run(upgrade()) for _ in range(8)}
    assert outcomes <= {"401", "403"}, outcomes


def test_a_revoked_host_token_opens_nothing(board: LiveBoard, scratch: Tenant, host: Host) -> None:
    with board.client(scratch.admin.token) as c:
        revoked = board.call(
            c, "POST", f"/api/v1/workspaces/{scratch.slug}/hosts/{host.host_id}/revoke"
        )
    assert revoked.status_code == 200, revoked
    with board.client(host.token) as c:
        for method, path in (
            ("GET", "/agent/v1/archives"),
            ("DELETE", "/agent/v1/archives?olderThanDays=1"),
            ("POST", "/agent/v1/archives?date=2026-01-01&table=gpu_sample"),
        ):
            refused(board.call(c, method, path, content=b"x"), 401)
    refused(push(board, host, observation()), 401)
