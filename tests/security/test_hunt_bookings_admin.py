"""Bookings, the directory and workspace settings under a hostile member or admin.

Each test here either holds or was a bug found by this file and fixed in board/:
a move or cancel read the booking before waiting for its host's lock (a cancel that
won the race was undone by the move, or the move of a deleted booking was a 500); a
booking decided "not revoked", or its member still a member, before waiting was stored
for a host revoked or a member removed meanwhile; a booking longer than a lowered
maxReservationDays could not even be shortened; right/..., posix/... and localtime were
taken as the workspace's zone (right/Europe/Berlin reads as +02:00 in December); a
booking or a directory link could name `unknown` (a held card with no process then
counted as the reserver's use); the hosts API listed a booking's GPUs as text sorted;
the reservations report counted a day the clocks change as 24 hours.

In process (the app and a real PostgreSQL). The races are made deterministic with a
connection that holds a row lock while the racers queue behind it, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from board.runtime import Runtime
from tests.board.answers import refused
from tests.board.builders import Tenant
from tests.board.db import execute, scalar
from tests.board.test_reports_builders import quick_tenant
from tests.security.test_hunt_api import book, busy_host, soon

DEADLINE = 60.0


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


async def test_a_booking_longer_than_a_lowered_limit_may_still_shrink(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 422: after an admin lowered maxReservationDays, the booking could be
    cancelled but not shortened; growing it is still held to the new limit."""
    tenant = await quick_tenant(app, "limit")
    host_id = await busy_host(app, client, tenant, "limit-node")
    start = soon(3)
    url = await members_booking(client, tenant, host_id, start, timedelta(days=10))
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings",
        json={"maxReservationDays": 2},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    shorter = (start + timedelta(days=5)).isoformat()
    r = await client.patch(url, json={"end": shorter}, headers=tenant.auth("member"))
    assert r.status_code == 200, r.text
    assert r.json()["end"] == shorter
    longer = (start + timedelta(days=6)).isoformat()
    assert "maxReservationDays" in refused(
        await client.patch(url, json={"end": longer}, headers=tenant.auth("member")), 422
    )
    moved = {"start": soon(4).isoformat(), "end": (soon(4) + timedelta(days=3)).isoformat()}
    refused(await client.patch(url, json=moved, headers=tenant.auth("member")), 422)
    shown = (await client.get(url, headers=tenant.auth())).json()
    assert shown["end"] == shorter


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


async def test_the_workspace_zone_is_an_iana_zone_not_a_copy_in_the_zone_folder(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 200: right/… (zoneinfo reads right/Europe/Berlin as +02:00 in December, so
    the booking form and the timeline were an hour off), posix/…, and `localtime` (the
    server's own /etc/localtime) were taken as the workspace's zone."""
    import zoneinfo

    winter = datetime(2026, 12, 4, 10, 0)
    assert zoneinfo.ZoneInfo("Europe/Berlin").utcoffset(winter) == timedelta(hours=1)
    tenant = await quick_tenant(app, "zone")
    url = f"/api/v1/workspaces/{tenant.slug}/settings"
    for zone in ("right/Europe/Berlin", "right/UTC", "posix/Europe/Berlin", "localtime"):
        r = await client.patch(url, json={"timezone": zone}, headers=tenant.auth())
        assert "IANA" in refused(r, 422), zone
    r = await client.get(url, headers=tenant.auth())
    assert r.json()["timezone"] == "UTC", r.text
    for zone in ("Europe/Berlin", "Asia/Kathmandu", "Etc/GMT-14", "EST5EDT", "Factory"):
        r = await client.patch(url, json={"timezone": zone}, headers=tenant.auth())
        assert r.status_code == 200, (zone, r.text)
        assert r.json()["timezone"] == zone


async def test_the_unknown_placeholder_is_nobodys_account(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 201 and a 200: a booking (or the directory) could name `unknown`, the
    placeholder a held card with no process is billed to, as the reserver's account:
    such a card then counted as the reserver's own use (used, not conflict)."""
    tenant = await quick_tenant(app, "unknown")
    host_id = await busy_host(app, client, tenant, "unknown-node")
    start = soon(3)
    body = {
        "hostId": host_id,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=1)).isoformat(),
    }
    for users in (["unknown"], ["alice", "unknown"]):
        r = await client.post(
            reservations(tenant.slug),
            json={**body, "linuxUsers": users},
            headers=tenant.auth("member"),
        )
        assert "placeholder" in refused(r, 422)
    base = f"/api/v1/workspaces/{tenant.slug}/directory"
    member = f"member@{tenant.slug}.example"
    r = await client.put(
        f"{base}/unknown", json={"memberEmail": member, "team": None}, headers=tenant.auth()
    )
    assert "placeholder" in refused(r, 422)
    assert await scalar(app, "SELECT count(*) FROM directory_entries") == 0
    # One linked before this rule (or by hand) is not copied into a new booking.
    r = await client.put(
        f"{base}/alice", json={"memberEmail": member, "team": None}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    await execute(
        app,
        "INSERT INTO directory_entries (workspace_id, linux_user, user_id) "
        "SELECT workspace_id, 'unknown', user_id FROM directory_entries",
    )
    r = await client.post(reservations(tenant.slug), json=body, headers=tenant.auth("member"))
    assert r.status_code == 201, r.text
    assert r.json()["linuxUsers"] == ["alice"]


async def test_the_hosts_api_shows_a_booking_in_force_as_get_shows_it(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a mismatch: the booking in force on a GPU listed its GPUs sorted as text
    (GPU-10 before GPU-2), GET …/reservations/{id} by GPU index."""
    from tests.board.builders import enroll, push
    from tests.board.test_reports_builders import gpu, observation

    tenant = await quick_tenant(app, "order")
    host = await enroll(client, tenant, "order-node")
    at = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    r = await push(client, host["agentToken"], observation(at, [gpu(2), gpu(10)]))
    assert r.status_code == 202, r.text
    host_id = str(host["hostId"])
    r = await client.post(
        reservations(tenant.slug),
        json={
            "hostId": host_id,
            "start": at.isoformat(),
            "end": (at + timedelta(hours=1)).isoformat(),
        },
        headers=tenant.auth(),
    )
    assert r.status_code == 201, r.text
    booked = r.json()
    # The booking's answer alone carries `warnings` (GPUs someone else is on now).
    assert booked.pop("warnings") == []
    assert booked["gpuUuids"] == ["GPU-2", "GPU-10"], booked
    shown = (
        await client.get(f"/api/v1/workspaces/{tenant.slug}/hosts/{host_id}", headers=tenant.auth())
    ).json()
    in_force = [g["reservation"] for g in shown["gpus"]]
    assert in_force == [booked, booked], in_force


async def test_removal_unlinks_the_members_linux_users(app: Any, client: httpx.AsyncClient) -> None:
    """Holds: removal unlinks the member's Linux users (the link's foreign key to the
    membership sets it null), for good; a link to someone removed is a 422."""
    tenant = await quick_tenant(app, "dir-rm")
    base = f"/api/v1/workspaces/{tenant.slug}"
    member = f"member@{tenant.slug}.example"
    r = await client.put(
        f"{base}/directory/carol", json={"memberEmail": member, "team": "ml"}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    r = await client.delete(f"{base}/members/{member}", headers=tenant.auth())
    assert r.status_code == 204, r.text
    listed = (await client.get(f"{base}/directory", headers=tenant.auth("finance"))).json()
    assert listed["entries"] == [
        {
            "linuxUser": "carol",
            "memberEmail": None,
            "team": "ml",
            "firstSeenAt": None,
            "lastSeenAt": None,
        }
    ], listed
    r = await client.put(
        f"{base}/directory/dave", json={"memberEmail": member, "team": None}, headers=tenant.auth()
    )
    refused(r, 422)
    r = await client.post(
        f"{base}/members", json={"email": member, "role": "member"}, headers=tenant.auth()
    )
    assert r.status_code == 201, r.text
    listed = (await client.get(f"{base}/directory", headers=tenant.auth())).json()
    assert [e["memberEmail"] for e in listed["entries"]] == [None]


async def test_reserved_hours_across_a_dst_change_are_the_hours_booked(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was 48 GPU-hours for a 47-hour booking: the report cut a booking at local
    midnights and subtracted two times of one zone as wall-clock times (Python's rule for
    a shared tzinfo), so the day the clocks sprang forward counted 24 hours, not 23."""
    tenant = await quick_tenant(app, "dst")
    host_id = await busy_host(app, client, tenant, "dst-node")
    base = f"/api/v1/workspaces/{tenant.slug}"
    # Over the night New York springs forward (2027-03-14), less than a year ahead
    # until then; later runs book the same span a year on (2028-03-12).
    year = 2027 if datetime.now(UTC) < datetime(2027, 3, 1, tzinfo=UTC) else 2028
    first = 13 if year == 2027 else 11
    start = f"{year}-03-{first:02d}T12:00:00-05:00"
    end = f"{year}-03-{first + 2:02d}T12:00:00-04:00"
    r = await client.post(
        f"{base}/reservations",
        json={"hostId": host_id, "start": start, "end": end},
        headers=tenant.auth(),
    )
    assert r.status_code == 201, r.text
    query = f"from={year}-03-{first - 1:02d}&to={year}-03-{first + 4:02d}&tz=America/New_York"
    days = (
        await client.get(f"{base}/reports/reservations?{query}&groupBy=day", headers=tenant.auth())
    ).json()
    assert {row["day"]: row["reservedGpuHours"] for row in days["rows"]} == {
        f"{year}-03-{first:02d}": 12.0,
        f"{year}-03-{first + 1:02d}": 23.0,
        f"{year}-03-{first + 2:02d}": 12.0,
    }, days
    assert days["totals"]["reservedGpuHours"] == 47.0
    for group in ("reservation", "member", "host"):
        shown = (
            await client.get(
                f"{base}/reports/reservations?{query}&groupBy={group}", headers=tenant.auth()
            )
        ).json()
        assert [row["reservedGpuHours"] for row in shown["rows"]] == [47.0], (group, shown)
