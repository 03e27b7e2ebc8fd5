"""Two `gua-board serve` processes on different ports against one PostgreSQL are one
board: a revoke on one shuts the host out of the other, sign-in limits and sessions
hold across both, the live stream crosses them, and maintenance runs in one only,
moving to the other when that one dies."""

from __future__ import annotations

import asyncio
import re
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from board.maintenance import LEADER_LOCK_KEY
from tests.board.test_stream import agent_socket, sse, util_message
from tests.ops.fleet import Fleet, enroll, make_fleet, observation, push, sample_value
from tests.support.live import LiveBoard, start_board, stop_board, wait_for

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
LEADER = "gua_board_maintenance_leader"
RUNS = "gua_board_maintenance_runs_total"


@pytest.fixture
def pair(database_url: str, tmp_path: Path) -> Iterator[tuple[LiveBoard, LiveBoard]]:
    shared = {
        # Cookies signed by one must be read by the other, as behind one load balancer.
        "GUA_BOARD_SECRET_KEY": secrets.token_urlsafe(36),
        "GUA_BOARD_SIGNIN_MAX_FAILURES": "3",
        "GUA_BOARD_MAINTENANCE_LEADER_RETRY_SECONDS": "0.5",
    }
    first = start_board(database_url, tmp_path / "a", shared)
    try:
        second = start_board(database_url, tmp_path / "b", shared)
    except BaseException:
        stop_board(first)
        raise
    yield first, second
    stop_board(second)
    stop_board(first)


def csrf(client: httpx.Client, path: str) -> str:
    page = client.get(path)
    assert page.status_code == 200, page.text[:500]
    found = _CSRF.search(page.text)
    assert found, f"no form on {path}"
    return found.group(1)


def sign_in(board: LiveBoard, email: str, password: str) -> httpx.Response:
    with board.client() as c:
        token = csrf(c, "/signin")
        return c.post(
            "/signin",
            data={"csrf_token": token, "email": email, "password": password, "next": "/"},
        )


def test_a_revoke_on_one_shuts_the_host_out_of_the_other(
    pair: tuple[LiveBoard, LiveBoard],
) -> None:
    a, b = pair
    fleet = make_fleet(a, "acme")
    host = enroll(a, fleet, "gpu-1")
    # Both processes have the token cached now.
    assert push(a, host["agentToken"], observation()).status_code == 202
    assert push(b, host["agentToken"], observation()).status_code == 202
    with b.client() as c:
        r = c.post(f"/api/v1/workspaces/acme/hosts/{host['hostId']}/revoke", headers=fleet.auth())
    assert r.status_code == 200, r.text
    assert push(a, host["agentToken"], observation()).status_code == 401


def test_sign_in_limits_and_sessions_hold_across_both(
    pair: tuple[LiveBoard, LiveBoard],
) -> None:
    a, b = pair
    fleet: Fleet = make_fleet(a, "acme")
    # Sessions: signed in on one, the cookie works on the other; signed out there, gone here.
    signed = sign_in(a, fleet.email, fleet.password)
    assert signed.status_code == 303, signed.text[:500]
    cookie = {"gua_session": signed.cookies["gua_session"]}
    with b.client(cookies=cookie) as on_b:
        assert on_b.get("/account").status_code == 200
        token = csrf(on_b, "/account")
        assert on_b.post("/signout", data={"csrf_token": token}).status_code == 303
    with a.client(cookies=cookie) as on_a:
        assert on_a.get("/account").status_code != 200
    # Sign-in limits: failures on either count together (limit 3 per email and address).
    statuses = [
        sign_in(board, fleet.email, "wrong-" + secrets.token_hex(4)).status_code
        for board in (a, b, a, b)
    ]
    assert statuses[:3] == [401, 401, 401]
    assert statuses[3] == 429
    assert sign_in(a, fleet.email, fleet.password).status_code == 429


async def test_the_live_stream_crosses_instances(pair: tuple[LiveBoard, LiveBoard]) -> None:
    a, b = pair
    fleet = await asyncio.to_thread(make_fleet, a, "acme")
    host = await asyncio.to_thread(enroll, a, fleet, "streams-to-a")
    async with (
        sse(b.url, "/api/v1/workspaces/acme/stream", fleet.auth()) as page_on_b,
        agent_socket(a.url, host["agentToken"]) as ws,
    ):
        for _ in range(120):  # the agent sends one a second; keep sending until seen
            await ws.send(util_message(util=73))
            try:
                got = await page_on_b.next_util(timeout=0.5)
            except TimeoutError:
                continue
            assert got["hostId"] == host["hostId"]
            assert got["gpus"][0]["utilPct"] == 73
            return
    raise AssertionError("a sample streamed to one instance never reached the other's page")


def leader_of(pair: tuple[LiveBoard, LiveBoard]) -> LiveBoard | None:
    leaders = [board for board in pair if sample_value(board.metrics(), LEADER) == 1]
    assert len(leaders) <= 1, "two maintenance leaders at once"
    return leaders[0] if leaders else None


def lock_holders(database_url: str) -> int:
    key = LEADER_LOCK_KEY
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = %s AND objid = %s AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())",
            [(key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF],
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_maintenance_runs_in_one_and_moves_when_it_dies(
    pair: tuple[LiveBoard, LiveBoard], database_url: str
) -> None:
    leader = wait_for(lambda: leader_of(pair), "a maintenance leader")
    follower = pair[1] if leader is pair[0] else pair[0]
    wait_for(lambda: sample_value(leader.metrics(), RUNS) >= 1, "the leader's first run")
    assert sample_value(follower.metrics(), RUNS) == 0
    assert lock_holders(database_url) == 1
    # The leader dies without a goodbye; PostgreSQL ends its session and the lock is free.
    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait(30)
    wait_for(lambda: sample_value(follower.metrics(), LEADER) == 1, "the follower to lead", 120)
    wait_for(lambda: sample_value(follower.metrics(), RUNS) >= 1, "the new leader's run", 120)
    assert lock_holders(database_url) == 1
