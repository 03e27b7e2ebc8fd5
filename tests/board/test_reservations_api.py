"""The reservations API: booking rules, roles, tenancy, the double-booking race, the feed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from tests.board.builders import enroll, push
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
