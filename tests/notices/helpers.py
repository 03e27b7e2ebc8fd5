"""Driving one GPU through states at chosen times, and reading what the board queued."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from prometheus_client import REGISTRY

from board.notices.worker import Notices
from tests.board.builders import Tenant, enroll, push
from tests.board.db import rows, scalar
from tests.board.test_reports_builders import gpu, observation, proc
from tests.notices.receivers import HttpReceiver

MINUTE = timedelta(minutes=1)


def gpu0(state: str, users: tuple[str, ...] = ("alice",)) -> dict[str, Any]:
    if state == "active":
        return gpu(0, util=90, state="active", procs=[proc(u) for u in users])
    if state == "idle_held":
        return gpu(0, util=0, state="idle_held", procs=[proc(u) for u in users])
    return gpu(0, util=0, state="idle", procs=[])


async def at(
    client: httpx.AsyncClient, agent_token: str, when: datetime, state: str, **kw: Any
) -> None:
    r = await push(client, agent_token, observation(when, [gpu0(state, **kw)]))
    assert r.status_code == 202, r.text


async def series(
    client: httpx.AsyncClient, agent_token: str, start: datetime, minutes: int, state: str
) -> datetime:
    """One observation a minute for `minutes` minutes from `start`; the last one's time."""
    when = start
    for i in range(minutes):
        when = start + i * MINUTE
        await at(client, agent_token, when, state)
    return when


def notices_of(app: Any) -> Notices:
    notices: Notices = app.state.runtime.notices
    return notices


async def events(app: Any, type_: str | None = None) -> list[tuple[Any, ...]]:
    found = await rows(app, "SELECT id, type, body FROM notice_events ORDER BY occurred_at, id")
    return [r for r in found if type_ is None or r[1] == type_]


async def deliveries(app: Any) -> list[tuple[Any, ...]]:
    return await rows(
        app,
        "SELECT d.id, e.type, d.kind, d.recipient, d.status, d.attempts, d.response_status "
        "FROM notice_deliveries d JOIN notice_events e ON e.id = d.event_id ORDER BY d.id",
    )


async def deliver_until(app: Any, check: Any, what: str, seconds: float = 60.0) -> None:
    """Run delivery passes until `check()` (async) holds; generous deadline, no timing."""
    deadline = time.monotonic() + seconds
    while True:
        await notices_of(app).deliver_due()
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}; deliveries {await deliveries(app)}")
        await asyncio.sleep(0.1)


async def link_alice(client: httpx.AsyncClient, tenant: Tenant) -> None:
    r = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/directory/alice",
        json={"memberEmail": f"member@{tenant.slug}.example", "team": None},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text


async def add_channel(client: httpx.AsyncClient, tenant: Tenant, **body: Any) -> dict[str, Any]:
    r = await client.post(
        f"/api/v1/workspaces/{tenant.slug}/notification-channels", json=body, headers=tenant.auth()
    )
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    return created


def start_of_run() -> datetime:
    """90 minutes ago on a whole minute: the timeline each test walks towards now."""
    return (datetime.now(UTC) - timedelta(minutes=90)).replace(second=0, microsecond=0)


async def wait_for(app: Any, check: Any, what: str, seconds: float = 60.0) -> None:
    """Until `check()` (async) holds while the board's own workers run; generous deadline."""
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}; deliveries {await deliveries(app)}")
        await asyncio.sleep(0.1)


S = timedelta(seconds=1)


def pass_failures(stage: str) -> float:
    found = REGISTRY.get_sample_value("gua_board_notices_pass_failures_total", {"stage": stage})
    return found or 0.0


async def workspace_id(app: Any, tenant: Tenant) -> int:
    found = await scalar(app, "SELECT id FROM workspaces WHERE slug = %s", tenant.slug)
    assert isinstance(found, int)
    return found


async def idle_held_for_31_minutes(
    client: httpx.AsyncClient, tenant: Tenant, hook: HttpReceiver
) -> tuple[str, Any]:
    """A webhook channel to `hook` and a GPU idle-held from t0 to t0+30m: the agent's
    token, and when the notice is due."""
    agent = str((await enroll(client, tenant, f"node-{tenant.slug}"))["agentToken"])
    channel = await add_channel(client, tenant, kind="webhook", url=hook.url)
    hook.secret = channel["secret"]
    last = await series(client, agent, start_of_run(), 31, "idle_held")
    return agent, last + 10 * S


def told(hook: HttpReceiver, type_: str) -> list[str]:
    """The workspaces whose `type_` notice the receiver got, signature verified."""
    return [
        r.json()["data"]["workspace"]["slug"]
        for r in hook.delivered()
        if r.verified and r.json()["type"] == type_
    ]
