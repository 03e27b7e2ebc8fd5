"""Builders for the reservation tests: bookings made at a chosen `now`, series, figures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import select

from board.auth.deps import member_context
from board.auth.models import User
from board.reservations import service
from board.reservations.schemas import ReservationIn, ReservationOut
from board.runtime import Runtime
from tests.board.builders import Tenant, enroll, push
from tests.board.test_reports_builders import gpu, observation, proc

MINUTE = timedelta(minutes=1)


async def book_at(
    app: Any, tenant: Tenant, now: datetime, role: str = "member", **body: Any
) -> ReservationOut:
    """A booking made as if the clock read `now` (the time rules are checked against it)."""
    runtime: Runtime = app.state.runtime
    async with runtime.sessions() as session:
        user_id = await session.scalar(
            select(User.id).where(User.email == f"{role}@{tenant.slug}.example")
        )
        assert user_id is not None
        ctx = await member_context(session, tenant.slug, user_id, "127.0.0.1")
        made = await service.create(session, ctx, ReservationIn.model_validate(body), now=now)
        await session.commit()
    return made


async def cancel_at(
    app: Any, tenant: Tenant, reservation_id: str, now: datetime, role: str = "member"
) -> None:
    runtime: Runtime = app.state.runtime
    async with runtime.sessions() as session:
        user_id = await session.scalar(
            select(User.id).where(User.email == f"{role}@{tenant.slug}.example")
        )
        assert user_id is not None
        ctx = await member_context(session, tenant.slug, user_id, "127.0.0.1")
        await service.cancel(session, ctx, reservation_id, now=now)
        await session.commit()


def segment_gpu(kind: str, util: int = 80) -> dict[str, Any]:
    """GPU-0 as one of the four classes sees it, for a booking of alice."""
    if kind == "used":
        return gpu(0, util=util, state="active", procs=[proc("alice")])
    if kind == "idle_held":
        return gpu(0, util=0, state="idle_held", procs=[proc("alice")])
    if kind == "conflict":
        return gpu(0, util=util, state="active", procs=[proc("bob")])
    return gpu(0, util=0, state="idle", procs=[])


async def push_series(
    client: httpx.AsyncClient, agent_token: str, start: datetime, kinds: list[str]
) -> None:
    """One observation a minute from `start`, GPU-0 in kinds[i] during minute i."""
    for i, kind in enumerate(kinds):
        r = await push(client, agent_token, observation(start + i * MINUTE, [segment_gpu(kind)]))
        assert r.status_code == 202, r.text


async def reservation_report(
    client: httpx.AsyncClient, tenant: Tenant, role: str = "finance", **params: str
) -> dict[str, Any]:
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/reservations",
        params=params,
        headers=tenant.auth(role),
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def busy_host(app: Any, client: httpx.AsyncClient, tenant: Tenant, name: str) -> str:
    """A host with one credited minute of `alice` on GPU-0; its public id."""
    host = await enroll(client, tenant, name)
    at = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
    for i in range(2):
        body = observation(
            at + timedelta(minutes=i), [gpu(0, util=50, state="active", procs=[proc("alice")])]
        )
        r = await push(client, host["agentToken"], body)
        assert r.status_code == 202, r.text
    return str(host["hostId"])


def soon(hours: int = 3) -> datetime:
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=hours)


async def book(client: httpx.AsyncClient, tenant: Tenant, host_id: str, **extra: Any) -> str:
    start = soon(extra.pop("in_hours", 3))
    body = {
        "hostId": host_id,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=1)).isoformat(),
        **extra,
    }
    r = await client.post(
        f"/api/v1/workspaces/{tenant.slug}/reservations", json=body, headers=tenant.auth()
    )
    assert r.status_code == 201, r.text
    return str(r.json()["reservationId"])


def reservations(slug: str, rest: str = "") -> str:
    return f"/api/v1/workspaces/{slug}/reservations{rest}"


async def members_booking(
    client: httpx.AsyncClient, tenant: Tenant, host_id: str, start: datetime, length: timedelta
) -> str:
    """A member books the host from `start` for `length`; the booking's URL."""
    r = await client.post(
        reservations(tenant.slug),
        json={
            "hostId": host_id,
            "start": start.isoformat(),
            "end": (start + length).isoformat(),
        },
        headers=tenant.auth("member"),
    )
    assert r.status_code == 201, r.text
    return reservations(tenant.slug, f"/{r.json()['reservationId']}")
