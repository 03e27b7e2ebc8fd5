"""The reservations API: booking rules, roles, tenancy, the double-booking race, the feed;
ranges and times it cannot hold (reversed, past year 9999) refused with a sentence; a
booking of a revoked host, or one longer than a lowered limit, may only shrink; the hosts
API shows a booking in force as GET shows it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.board.answers import refused
from tests.board.builders import enroll, push
from tests.board.reservation_builders import book, busy_host, members_booking, reservations, soon
from tests.board.test_reports_builders import gpu, observation, quick_tenant


def _slot(hours_ahead: int = 1, length: int = 2) -> tuple[str, str]:
    start = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(hours=hours_ahead)
    return start.isoformat(), (start + timedelta(hours=length)).isoformat()


async def _host(client, tenant):
    host = await enroll(client, tenant, "node")
    body = observation(datetime.now(UTC), [gpu(0), gpu(1)])
    assert (await push(client, host["agentToken"], body)).status_code == 202
    return host


def _url(tenant, rest: str = "") -> str:
    return f"/api/v1/workspaces/{tenant.slug}/reservations{rest}"


async def test_book_list_move_cancel(app, client) -> None:
    tenant = await quick_tenant(app, "rapi")
    host = await _host(client, tenant)
    start, end = _slot()
    r = await client.post(
        _url(tenant),
        json={"hostId": host["hostId"], "start": start, "end": end, "note": "training"},
        headers=tenant.auth("member"),
    )
    assert r.status_code == 201, r.text
    made = r.json()
    assert list(made) == [
        "reservationId",
        "hostId",
        "gpuUuids",
        "memberEmail",
        "linuxUsers",
        "start",
        "end",
        "note",
        "warnings",  # GPUs someone else is on now (test_reservations_busy.py): none here
    ]
    assert made["warnings"] == []
    assert made["gpuUuids"] == ["GPU-0", "GPU-1"]
    assert made["memberEmail"] == f"member@{tenant.slug}.example"
    listed = (await client.get(_url(tenant), headers=tenant.auth("finance"))).json()
    assert [x["reservationId"] for x in listed["reservations"]] == [made["reservationId"]]

    later = (datetime.fromisoformat(end) + timedelta(hours=1)).isoformat()
    r = await client.patch(
        _url(tenant, f"/{made['reservationId']}"),
        json={"end": later},
        headers=tenant.auth("member"),
    )
    assert r.status_code == 200, r.text
    assert r.json()["end"] == datetime.fromisoformat(later).astimezone(UTC).isoformat()

    feed = await client.get(_url(tenant, ".ics"), headers=tenant.auth("finance"))
    assert feed.status_code == 200
    assert feed.headers["content-type"].startswith("text/calendar")
    assert made["reservationId"] in feed.text
    assert "BEGIN:VEVENT" in feed.text

    r = await client.delete(
        _url(tenant, f"/{made['reservationId']}"), headers=tenant.auth("member")
    )
    assert r.status_code == 204
    listed = (await client.get(_url(tenant), headers=tenant.auth("member"))).json()
    assert listed["reservations"] == []


async def test_an_overlap_is_a_409_naming_the_other_booking(app, client) -> None:
    tenant = await quick_tenant(app, "rapi")
    host = await _host(client, tenant)
    start, end = _slot()
    first = await client.post(
        _url(tenant),
        json={"hostId": host["hostId"], "gpuUuids": ["GPU-1"], "start": start, "end": end},
        headers=tenant.auth("admin"),
    )
    assert first.status_code == 201
    mid = (datetime.fromisoformat(start) + timedelta(hours=1)).isoformat()
    r = await client.post(
        _url(tenant),
        json={"hostId": host["hostId"], "start": mid, "end": end},
        headers=tenant.auth("member"),
    )
    assert r.status_code == 409
    assert first.json()["reservationId"] in r.json()["detail"]
    # The other GPU alone is free, and back to back is not an overlap.
    for body in (
        {"gpuUuids": ["GPU-0"], "start": mid, "end": end},
        {"gpuUuids": ["GPU-1"], "start": end, "end": _slot(4)[1]},
    ):
        r = await client.post(
            _url(tenant), json={"hostId": host["hostId"], **body}, headers=tenant.auth("member")
        )
        assert r.status_code == 201, r.text


async def test_two_concurrent_bookings_of_one_slot(app, client) -> None:
    tenant = await quick_tenant(app, "rapi")
    host = await _host(client, tenant)
    for round_ in range(3):
        start, end = _slot(1 + 3 * round_)
        body = {"hostId": host["hostId"], "gpuUuids": ["GPU-0"], "start": start, "end": end}
        answers = await asyncio.gather(
            client.post(_url(tenant), json=body, headers=tenant.auth("member")),
            client.post(_url(tenant), json=body, headers=tenant.auth("admin")),
        )
        assert sorted(a.status_code for a in answers) == [201, 409], [a.text for a in answers]
        assert all(isinstance(a.json().get("detail", ""), str) for a in answers)


async def test_bad_bookings_are_refused_and_change_nothing(app, client) -> None:
    tenant = await quick_tenant(app, "rapi")
    other = await quick_tenant(app, "rapi")
    host = await _host(client, tenant)
    foreign = await _host(client, other)
    start, end = _slot()
    ok = {"hostId": host["hostId"], "start": start, "end": end}
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    cases = [
        ({**ok, "start": start.replace(":00+", ":30+", 1)}, 422),
        ({**ok, "end": start}, 422),
        ({**ok, "end": (now + timedelta(days=20)).isoformat()}, 422),
        ({**ok, "start": (now - timedelta(hours=1)).isoformat()}, 422),
        ({**ok, "gpuUuids": ["GPU-9"]}, 422),
        ({**ok, "gpuUuids": ["GPU-0", "GPU-0"]}, 422),
        ({**ok, "hostId": foreign["hostId"]}, 422),
        ({**ok, "hostId": "not-a-uuid"}, 422),
        ({**ok, "linuxUsers": ["bad user;"]}, 422),
        ({**ok, "note": "x" * 501}, 422),
        ({**ok, "memberEmail": "nobody@example.com"}, 403),
        ({**ok, "start": "2026-13-45T00:00:00Z"}, 422),
        ({**ok, "start": start.replace("+00:00", "")}, 422),
        ({**ok, "extra": 1}, 422),
    ]
    for body, status in cases:
        r = await client.post(_url(tenant), json=body, headers=tenant.auth("member"))
        assert r.status_code == status, (body, r.text)
        assert isinstance(r.json()["detail"], str)
    r = await client.post(_url(tenant), json=ok, headers=tenant.auth("finance"))
    assert r.status_code == 403
    r = await client.post(
        _url(tenant), json={**ok, "memberEmail": "nobody@example.com"}, headers=tenant.auth()
    )
    assert r.status_code == 422
    listed = (await client.get(_url(tenant), headers=tenant.auth())).json()
    assert listed["reservations"] == []


async def test_a_refused_linux_user_is_named_as_one(app, client) -> None:
    """["no spaces allowed"] was refused as "must not contain NUL"."""
    tenant = await quick_tenant(app, "rapi")
    host = await _host(client, tenant)
    start, end = _slot()
    body = {"hostId": host["hostId"], "start": start, "end": end}
    for users in (["no spaces allowed"], ["alice", "-dash"], ["bad user;"]):
        r = await client.post(
            _url(tenant), json={**body, "linuxUsers": users}, headers=tenant.auth("member")
        )
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert isinstance(detail, str)
        index = len(users) - 1
        assert detail.startswith(f"linuxUsers.{index}: is not a valid Linux user name"), detail
        assert "NUL" not in detail


async def test_roles_and_tenancy(app, client) -> None:
    tenant = await quick_tenant(app, "rapi")
    other = await quick_tenant(app, "rapi")
    host = await _host(client, tenant)
    start, end = _slot()
    r = await client.post(
        _url(tenant),
        json={
            "hostId": host["hostId"],
            "start": start,
            "end": end,
            "memberEmail": f"finance@{tenant.slug}.example",
        },
        headers=tenant.auth("admin"),
    )
    assert r.status_code == 201, r.text
    rid = r.json()["reservationId"]
    # A member may not change someone else's booking; finance reads only.
    assert (
        await client.patch(
            _url(tenant, f"/{rid}"), json={"note": "x"}, headers=tenant.auth("member")
        )
    ).status_code == 403
    assert (
        await client.delete(_url(tenant, f"/{rid}"), headers=tenant.auth("finance"))
    ).status_code == 403
    assert (
        await client.get(_url(tenant, f"/{rid}"), headers=tenant.auth("finance"))
    ).status_code == 200
    # Another workspace's token, with this workspace's slug or its own: 404, nothing shown.
    for path in (_url(tenant), _url(tenant, f"/{rid}"), _url(tenant, ".ics")):
        r = await client.get(path, headers=other.auth())
        assert r.status_code == 404
    for method in ("GET", "PATCH", "DELETE"):
        r = await client.request(
            method,
            _url(other, f"/{rid}"),
            headers=other.auth(),
            json={"note": "x"} if method == "PATCH" else None,
        )
        assert r.status_code == 404, (method, r.text)
    report = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/reservations",
        params={"from": "2026-01-01", "to": "2026-01-02"},
        headers=other.auth(),
    )
    assert report.status_code == 404
    assert (await client.delete(_url(tenant, f"/{rid}"), headers=tenant.auth())).status_code == 204


async def test_moving_never_changes_the_past(app, client) -> None:
    tenant = await quick_tenant(app, "rapi")
    host = await _host(client, tenant)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    r = await client.post(
        _url(tenant),
        json={
            "hostId": host["hostId"],
            "start": (now - timedelta(minutes=2)).isoformat(),
            "end": (now + timedelta(hours=1)).isoformat(),
        },
        headers=tenant.auth("member"),
    )
    assert r.status_code == 201, r.text
    rid = r.json()["reservationId"]
    for body in (
        {"start": (now + timedelta(minutes=10)).isoformat()},
        {"end": (now - timedelta(minutes=1)).isoformat()},
        {"end": (now + timedelta(minutes=90, seconds=30)).isoformat()},
    ):
        r = await client.patch(_url(tenant, f"/{rid}"), json=body, headers=tenant.auth("member"))
        assert r.status_code == 422, (body, r.text)
    r = await client.delete(_url(tenant, f"/{rid}"), headers=tenant.auth("member"))
    assert r.status_code == 204
    shown = (await client.get(_url(tenant, f"/{rid}"), headers=tenant.auth("member"))).json()
    assert shown["start"] == (now - timedelta(minutes=2)).isoformat()
    assert datetime.fromisoformat(shown["end"]) <= datetime.now(UTC)


async def test_reservation_lists_with_a_reversed_range_are_422(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 500: PostgreSQL refuses tstzrange(lower > upper)."""
    tenant = await quick_tenant(app, "rev")
    base = f"/api/v1/workspaces/{tenant.slug}"
    for query in ("from=2026-01-02&to=2026-01-01", "to=2020-01-01"):
        for path in ("reservations", "reservations.ics"):
            r = await client.get(f"{base}/{path}?{query}", headers=tenant.auth())
            assert "must not be before" in refused(r, 422)
    for query in (
        "from=0001-01-01T00:00:00%2B05:00",
        "from=9999-12-31T23:00:00-05:00",
        "from=1e309",
        "hostId=%00",
        "memberEmail=" + "x" * 400,
        "hostId=" + "x" * 65,
    ):
        for path in ("reservations", "reservations.ics"):
            refused(await client.get(f"{base}/{path}?{query}", headers=tenant.auth()))
    # The same day twice is an empty window, not an error.
    r = await client.get(
        f"{base}/reservations?from=2026-01-01&to=2026-01-01", headers=tenant.auth()
    )
    assert r.status_code == 200, r.text


async def test_booking_times_past_year_9999_are_422(app: Any, client: httpx.AsyncClient) -> None:
    """Was a 500 (OverflowError): a whole-minute time whose UTC is in year 10000 or 0."""
    tenant = await quick_tenant(app, "far")
    host_id = await busy_host(app, client, tenant, "far-node")
    booked = await book(client, tenant, host_id)
    base = f"/api/v1/workspaces/{tenant.slug}/reservations"
    start = soon(5).isoformat()
    for body in (
        {"hostId": host_id, "start": start, "end": "9999-12-31T23:00:00-12:00"},
        {"hostId": host_id, "start": "9999-12-31T23:00:00-12:00", "end": start},
        {"hostId": host_id, "start": "0001-01-01T00:00:00+05:00", "end": start},
        {"hostId": host_id, "start": 1e20, "end": 1e21},
        {"hostId": host_id, "start": start, "end": start},
        {"hostId": host_id.upper() + "x", "start": start, "end": start},
    ):
        refused(await client.post(base, json=body, headers=tenant.auth()), 422)
    for patch in (
        {"end": "9999-12-31T23:00:00-12:00"},
        {"start": "0001-01-01T00:00:00+05:00"},
        {"start": "9999-12-31T22:00:00Z", "end": "9999-12-31T23:00:00Z"},
        {"end": "0001-01-01T00:00:00Z"},
        {"start ": start},
    ):
        refused(await client.patch(f"{base}/{booked}", json=patch, headers=tenant.auth()), 422)
    listed = (await client.get(base, headers=tenant.auth())).json()["reservations"]
    assert [b["reservationId"] for b in listed] == [booked]
    assert listed[0]["end"] == (soon(3) + timedelta(hours=1)).isoformat()


async def test_a_booking_of_a_revoked_host_only_shrinks(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 200: a booking of a revoked host could be extended or moved later, while a
    new booking of it is refused; shortening and cancelling still work."""
    tenant = await quick_tenant(app, "revoked")
    host_id = await busy_host(app, client, tenant, "revoked-node")
    booked = await book(client, tenant, host_id)  # soon(3) .. soon(3) + 1 h
    base = f"/api/v1/workspaces/{tenant.slug}"
    r = await client.post(f"{base}/hosts/{host_id}/revoke", headers=tenant.auth())
    assert r.status_code == 200, r.text
    url = f"{base}/reservations/{booked}"
    start = soon(3)
    for patch in (
        {"end": (start + timedelta(hours=2)).isoformat()},
        {"start": (start - timedelta(hours=1)).isoformat()},
        {
            "start": (start + timedelta(hours=5)).isoformat(),
            "end": (start + timedelta(hours=6)).isoformat(),
        },
    ):
        assert "revoked" in refused(await client.patch(url, json=patch, headers=tenant.auth()), 422)
    shorter = (start + timedelta(minutes=30)).isoformat()
    r = await client.patch(url, json={"end": shorter, "note": "half"}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert r.json()["end"] == shorter
    r = await client.delete(url, headers=tenant.auth())
    assert r.status_code == 204, r.text


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
