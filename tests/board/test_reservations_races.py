"""Bookings that race: a move, an extension or a new booking queued behind a cancel, a
host's revocation, a member's removal or another member's move. Each waits for the host's
lock and then decides on what it finds, so the race ends as the same requests in order.

The races are made deterministic with a connection that holds a row lock while the racers
queue behind it, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from board.runtime import Runtime
from tests.board.answers import refused
from tests.board.db import scalar
from tests.board.reservation_builders import book, busy_host, members_booking, reservations, soon
from tests.board.test_reports_builders import quick_tenant

DEADLINE = 60.0


async def lock_waiters(app: Any) -> int:
    found = await scalar(
        app,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()",
    )
    return int(found)


async def queued(
    app: Any, host_id: str, *racers: Awaitable[httpx.Response], hold: str = ""
) -> list[httpx.Response]:
    """Run the racers one after another into a queue behind a row lock (the host's, or
    what `hold` locks), then let them go: PostgreSQL hands a row on in queue order."""
    runtime: Runtime = app.state.runtime
    tasks: list[asyncio.Task[httpx.Response]] = []
    async with runtime.pool.connection() as holder, holder.transaction():
        if hold:
            await holder.execute(hold.encode())
        else:
            await holder.execute("SELECT 1 FROM hosts WHERE public_id = %s FOR UPDATE", [host_id])
        for n, racer in enumerate(racers, start=1):
            tasks.append(asyncio.ensure_future(racer))
            deadline = asyncio.get_running_loop().time() + DEADLINE
            while await lock_waiters(app) < n:
                done = [t for t in tasks if t.done()]
                assert not done, [t.result().text for t in done]
                assert asyncio.get_running_loop().time() < deadline, "a racer never waited"
                await asyncio.sleep(0.02)
    return list(await asyncio.gather(*tasks))


async def test_a_move_queued_behind_a_cancel_does_not_touch_the_deleted_booking(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 500 (AssertionError): the move read the booking before the cancel deleted it."""
    tenant = await quick_tenant(app, "race-del")
    host_id = await busy_host(app, client, tenant, "race-node")
    booked = await book(client, tenant, host_id)  # soon(3) .. soon(3) + 1 h
    url = reservations(tenant.slug, f"/{booked}")
    later = (soon(3) + timedelta(hours=2)).isoformat()
    cancelled, moved = await queued(
        app,
        host_id,
        client.delete(url, headers=tenant.auth("member")),
        client.patch(url, json={"end": later}, headers=tenant.auth()),
    )
    assert cancelled.status_code == 403, cancelled.text  # not the member's booking
    booked_by_member = await book(client, tenant, host_id, in_hours=6)
    url = reservations(tenant.slug, f"/{booked_by_member}")
    later = (soon(6) + timedelta(hours=2)).isoformat()
    cancelled, moved = await queued(
        app,
        host_id,
        client.delete(url, headers=tenant.auth()),
        client.patch(url, json={"end": later}, headers=tenant.auth()),
    )
    assert cancelled.status_code == 204, cancelled.text
    assert "cancelled" in refused(moved, 409)
    assert (await client.get(url, headers=tenant.auth())).status_code == 404
    gone = await scalar(
        app, "SELECT count(*) FROM reservations WHERE public_id = %s", booked_by_member
    )
    assert gone == 0


async def test_an_extension_queued_behind_a_cancel_does_not_revive_it(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 200: the extension read the running booking before the cancel ended it, and
    moved its end out again (a cancelled booking holding the GPUs for another hour)."""
    tenant = await quick_tenant(app, "race-end")
    host_id = await busy_host(app, client, tenant, "race-node")
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    url = await members_booking(client, tenant, host_id, start, timedelta(hours=1))
    longer = (start + timedelta(hours=3)).isoformat()
    cancelled, extended = await queued(
        app,
        host_id,
        client.delete(url, headers=tenant.auth("member")),
        client.patch(url, json={"end": longer}, headers=tenant.auth("member")),
    )
    assert cancelled.status_code == 204, cancelled.text
    refused(extended, 409, 422)
    shown = (await client.get(url, headers=tenant.auth())).json()
    assert datetime.fromisoformat(shown["end"]) <= datetime.now(UTC), shown


async def test_a_booking_queued_behind_a_revocation_is_refused(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 201: the host was found not revoked before the booking waited for its lock."""
    tenant = await quick_tenant(app, "race-rev")
    host_id = await busy_host(app, client, tenant, "race-node")
    start = soon(3)
    body = {
        "hostId": host_id,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=1)).isoformat(),
    }
    base = f"/api/v1/workspaces/{tenant.slug}"
    revoked, booked = await queued(
        app,
        host_id,
        client.post(f"{base}/hosts/{host_id}/revoke", headers=tenant.auth()),
        client.post(reservations(tenant.slug), json=body, headers=tenant.auth("member")),
    )
    assert revoked.status_code == 200, revoked.text
    assert "revoked" in refused(booked, 409)
    assert await scalar(app, "SELECT count(*) FROM reservations") == 0


async def test_two_members_moving_into_one_slot_at_once_one_wins(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Both queue behind the host's lock; the second sees the first and gets a 409 naming
    it (this workspace's booking only)."""
    tenant = await quick_tenant(app, "race-slot")
    host_id = await busy_host(app, client, tenant, "race-node")
    mine = await book(client, tenant, host_id, in_hours=3)
    r = await client.post(
        reservations(tenant.slug),
        json={
            "hostId": host_id,
            "start": soon(6).isoformat(),
            "end": soon(7).isoformat(),
        },
        headers=tenant.auth("member"),
    )
    assert r.status_code == 201, r.text
    theirs = r.json()["reservationId"]
    slot = {"start": soon(10).isoformat(), "end": soon(11).isoformat()}
    first, second = await queued(
        app,
        host_id,
        client.patch(reservations(tenant.slug, f"/{mine}"), json=slot, headers=tenant.auth()),
        client.patch(
            reservations(tenant.slug, f"/{theirs}"), json=slot, headers=tenant.auth("member")
        ),
    )
    assert first.status_code == 200, first.text
    detail = refused(second, 409)
    assert mine in detail
    assert f"admin@{tenant.slug}.example" in detail
    overlapping = await scalar(
        app,
        "SELECT count(*) FROM reservation_gpus a JOIN reservation_gpus b "
        "ON a.gpu_id = b.gpu_id AND a.reservation_id < b.reservation_id "
        "AND a.during && b.during",
    )
    assert overlapping == 0


async def test_a_booking_queued_behind_the_members_removal_is_refused(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 201: a member removed while their booking was being made was stored as the
    booking's owner, a non-member holding the GPUs. The removal and the booking queue on
    the membership's row (the booking reads it FOR SHARE), the removal first."""
    tenant = await quick_tenant(app, "race-rm")
    host_id = await busy_host(app, client, tenant, "race-node")
    member = f"member@{tenant.slug}.example"
    member_id = await scalar(app, "SELECT id FROM users WHERE email = %s", member)
    start = soon(3)
    body = {
        "hostId": host_id,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=1)).isoformat(),
    }
    base = f"/api/v1/workspaces/{tenant.slug}"
    for by_admin in (False, True):
        removed, booked = await queued(
            app,
            host_id,
            client.delete(f"{base}/members/{member}", headers=tenant.auth()),
            client.post(
                reservations(tenant.slug),
                json={**body, "memberEmail": member} if by_admin else body,
                headers=tenant.auth("admin" if by_admin else "member"),
            ),
            hold=f"SELECT 1 FROM memberships WHERE user_id = {int(member_id)} FOR UPDATE",
        )
        assert removed.status_code == 204, removed.text
        assert "removed" in refused(booked, 409)
        assert await scalar(app, "SELECT count(*) FROM reservations") == 0
        r = await client.post(
            f"{base}/members", json={"email": member, "role": "member"}, headers=tenant.auth()
        )
        assert r.status_code == 201, r.text
