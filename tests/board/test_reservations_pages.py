"""Availability in the hosts API, and the reservations and directory pages over plain HTTP:
roles, CSRF, tenancy, bad input (a readable refusal, nothing changed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.board.builders import enroll, make_tenant, push
from tests.board.test_reports_builders import gpu, observation, proc
from tests.web.helpers import csrf_of, sign_in


async def _host_with_gpus(client: Any, tenant: Any, name: str = "node") -> dict[str, Any]:
    host = await enroll(client, tenant, name)
    gpus = [
        gpu(0, util=90, state="active", procs=[proc("alice")]),
        gpu(1, util=0, state="idle_held", procs=[proc("alice")]),
        gpu(2, util=80, state="active", procs=[proc("bob")]),
        gpu(3, util=0, state="idle", procs=[]),
        gpu(4, util=70, state="active", procs=[proc("bob")]),
    ]
    r = await push(client, host["agentToken"], observation(datetime.now(UTC), gpus))
    assert r.status_code == 202, r.text
    return host


async def _book(client: Any, tenant: Any, host_id: str, uuids: list[str], **extra: Any) -> Any:
    start = datetime.now(UTC).replace(second=0, microsecond=0)
    body = {
        "hostId": host_id,
        "gpuUuids": uuids,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=2)).isoformat(),
        "linuxUsers": ["alice"],
        **extra,
    }
    return await client.post(
        f"/api/v1/workspaces/{tenant.slug}/reservations", json=body, headers=tenant.auth("member")
    )


async def test_hosts_api_carries_availability_and_the_booking_in_force(app, client) -> None:
    tenant = await make_tenant(app, "avapi")
    host = await _host_with_gpus(client, tenant)
    made = await _book(client, tenant, host["hostId"], ["GPU-0", "GPU-1", "GPU-2", "GPU-3"])
    assert made.status_code == 201, made.text
    expected = {
        "GPU-0": "reserved_in_use",
        "GPU-1": "reserved_idle",
        "GPU-2": "reserved_conflict",
        "GPU-3": "reserved_idle",
        "GPU-4": "in_use",
    }
    for role in ("admin", "member", "finance"):
        listed = await client.get(
            f"/api/v1/workspaces/{tenant.slug}/hosts", headers=tenant.auth(role)
        )
        assert listed.status_code == 200
        (shown,) = listed.json()["hosts"]
        one = await client.get(
            f"/api/v1/workspaces/{tenant.slug}/hosts/{host['hostId']}", headers=tenant.auth(role)
        )
        for view in (shown, one.json()):
            got = {g["uuid"]: g["availability"] for g in view["gpus"]}
            assert got == expected, role
            booked = {g["uuid"]: g["reservation"] for g in view["gpus"]}
            assert booked["GPU-4"] is None
            assert booked["GPU-0"]["reservationId"] == made.json()["reservationId"]
            assert booked["GPU-0"]["gpuUuids"] == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]

    # Another workspace sees none of it, and its hosts are free of this booking.
    other = await make_tenant(app, "avapi-other")
    theirs = await _host_with_gpus(client, other, "theirs")
    listed = await client.get(f"/api/v1/workspaces/{other.slug}/hosts", headers=other.auth())
    (shown,) = listed.json()["hosts"]
    assert shown["hostId"] == theirs["hostId"]
    assert {g["availability"] for g in shown["gpus"]} == {"in_use", "free"}
    assert all(g["reservation"] is None for g in shown["gpus"])


async def test_a_stale_host_is_not_observed(app, client) -> None:
    tenant = await make_tenant(app, "avapi")
    host = await enroll(client, tenant, "old")
    old = datetime.now(UTC) - timedelta(hours=3)
    r = await push(client, host["agentToken"], observation(old, [gpu(0)]))
    assert r.status_code == 202
    listed = await client.get(f"/api/v1/workspaces/{tenant.slug}/hosts", headers=tenant.auth())
    (shown,) = listed.json()["hosts"]
    assert [g["availability"] for g in shown["gpus"]] == ["not_observed"]


async def test_booking_page_refuses_bad_input_and_changes_nothing(app, client) -> None:
    tenant = await make_tenant(app, "pages")
    other = await make_tenant(app, "pages-other")
    host = await _host_with_gpus(client, tenant)
    theirs = await _host_with_gpus(client, other, "theirs")
    await sign_in(client, f"member@{tenant.slug}.example")
    page = await client.get(f"/w/{tenant.slug}/reservations?host={host['hostId']}")
    assert page.status_code == 200
    assert 'name="gpus" value="GPU-0"' in page.text
    token = csrf_of(page.text)
    url = f"/w/{tenant.slug}/reservations"
    # Two hours ahead: past the hour in which a GPU someone is on now asks "Book anyway".
    soon = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(hours=2)
    good = {
        "csrf_token": token,
        "host": host["hostId"],
        "start": soon.strftime("%Y-%m-%dT%H:%M"),
        "end": (soon + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
        "note": "<script>x</script>",
    }
    bad_cases = [
        # The page's own words (tests/web/test_booking_page.py); the API keeps its own.
        ({"host": theirs["hostId"]}, 422, "Host: pick one of this workspace"),
        ({"host": "not-a-uuid"}, 422, "Host: pick one of this workspace"),
        ({"start": "tomorrow"}, 422, "is not a date and time"),
        ({"end": good["start"]}, 422, "End must be after Start."),
        ({"gpus": ["GPU-9"]}, 422, "GPUs: tick GPUs of node"),
        ({"member": f"admin@{tenant.slug}.example"}, 403, "Only an admin may book for"),
        ({"csrf_token": "forged"}, 403, "did not come from this board"),
    ]
    for change, status, detail in bad_cases:
        r = await client.post(url, data={**good, **change})
        assert r.status_code == status, (change, r.text[:300])
        assert detail in r.text, change
    listed = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reservations", headers=tenant.auth()
    )
    assert listed.json()["reservations"] == []

    r = await client.post(url, data=good)
    assert r.status_code == 303
    assert r.headers["location"].endswith("&notice=booked#mine")
    shown = await client.get(r.headers["location"])
    assert "&lt;script&gt;x&lt;/script&gt;" in shown.text
    assert "<script>x</script>" not in shown.text
    # The same slot again: 409 naming the booking in the way.
    r = await client.post(url, data={**good, "gpus": ["GPU-1"]})
    assert r.status_code == 409
    assert f"already booked by member@{tenant.slug}.example" in r.text

    # Another workspace's page and bookings are not this member's.
    assert (await client.get(f"/w/{other.slug}/reservations")).status_code in (403, 404)
    made = (
        await client.get(f"/api/v1/workspaces/{tenant.slug}/reservations", headers=tenant.auth())
    ).json()["reservations"][0]
    r = await client.post(
        f"/w/{other.slug}/reservations/{made['reservationId']}/cancel",
        data={"csrf_token": token},
    )
    assert r.status_code in (403, 404)


async def test_finance_may_look_but_not_book(app, client) -> None:
    tenant = await make_tenant(app, "pages")
    host = await _host_with_gpus(client, tenant)
    await sign_in(client, f"finance@{tenant.slug}.example")
    page = await client.get(f"/w/{tenant.slug}/reservations")
    assert page.status_code == 200
    assert 'id="book-form"' not in page.text
    soon = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(hours=1)
    r = await client.post(
        f"/w/{tenant.slug}/reservations",
        data={
            "csrf_token": csrf_of(page.text),
            "host": host["hostId"],
            "start": soon.strftime("%Y-%m-%dT%H:%M"),
            "end": (soon + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
        },
    )
    assert r.status_code == 403
    assert (await client.get(f"/w/{tenant.slug}/admin/directory")).status_code == 403


async def test_directory_page_saves_and_refuses(app, client) -> None:
    tenant = await make_tenant(app, "pages")
    await _host_with_gpus(client, tenant)
    await sign_in(client, f"admin@{tenant.slug}.example")
    page = await client.get(f"/w/{tenant.slug}/admin/directory")
    assert page.status_code == 200
    token = csrf_of(page.text)
    url = f"/w/{tenant.slug}/admin/directory"
    for data, status, detail in [
        ({"linux_user": "bad name;"}, 422, "is not a Linux user name"),
        ({"linux_user": "ok", "member": "stranger@else.example"}, 422, "is not a member"),
        ({"linux_user": "ok", "team": "a\x01b"}, 422, "team"),
    ]:
        r = await client.post(url, data={"csrf_token": token, **data})
        assert r.status_code == status, (data, r.text[:300])
        assert detail in r.text
    api = f"/api/v1/workspaces/{tenant.slug}/directory"
    assert (await client.get(api, headers=tenant.auth())).json()["entries"] == []
    r = await client.post(
        url,
        data={
            "csrf_token": token,
            "linux_user": "alice",
            "member": f"member@{tenant.slug}.example",
            "team": "vision",
        },
    )
    assert r.status_code == 303
    (entry,) = (await client.get(api, headers=tenant.auth())).json()["entries"]
    assert entry["memberEmail"] == f"member@{tenant.slug}.example"
    assert entry["team"] == "vision"


async def test_calendar_url_from_the_page(app, client) -> None:
    tenant = await make_tenant(app, "pages")
    await sign_in(client, f"member@{tenant.slug}.example")
    page = await client.get(f"/w/{tenant.slug}/reservations")
    url = f"/w/{tenant.slug}/reservations/calendar-feed"
    assert (await client.post(url, data={"csrf_token": "forged"})).status_code == 403
    r = await client.post(url, data={"csrf_token": csrf_of(page.text)})
    assert r.status_code == 201
    start = r.text.index("/api/v1/calendar/reservations.ics?token=")
    feed_path = r.text[start : r.text.index("<", start)]
    assert (await client.get(feed_path)).status_code == 200
    again = await client.get(f"/w/{tenant.slug}/reservations")
    assert "reservations.ics?token=" not in again.text  # shown once


async def test_a_gpu_card_books_that_gpu(app, client) -> None:
    """Members and admins get "Book this GPU" on each GPU card; it opens the booking form
    with the host and that GPU chosen. Finance, who may not book, gets no link."""
    tenant = await make_tenant(app, "cardbook")
    host = await _host_with_gpus(client, tenant)
    await sign_in(client, f"member@{tenant.slug}.example")
    page = await client.get(f"/w/{tenant.slug}/hosts/{host['hostId']}")
    assert page.status_code == 200
    link = f"/w/{tenant.slug}/reservations?host={host['hostId']}&amp;gpu=GPU-3#book"
    assert link in page.text
    fleet = await client.get(f"/w/{tenant.slug}/?view=cards")
    assert link in fleet.text
    form = await client.get(link.replace("&amp;", "&").split("#")[0])
    assert form.status_code == 200
    assert 'value="GPU-3" checked' in form.text
    assert form.text.count(" checked") == 1
    # A GPU that is not the host's chooses nothing.
    odd = await client.get(f"/w/{tenant.slug}/reservations?host={host['hostId']}&gpu=GPU-99")
    assert odd.status_code == 200
    assert " checked" not in odd.text

    await client.post("/signout", data={"csrf_token": csrf_of(page.text)})
    await sign_in(client, f"finance@{tenant.slug}.example")
    seen = await client.get(f"/w/{tenant.slug}/hosts/{host['hostId']}")
    assert seen.status_code == 200
    assert "Book this GPU" not in seen.text


def test_a_wall_time_the_clocks_skip_is_refused_not_moved() -> None:
    """02:30 on Berlin's spring-forward night does not exist: zoneinfo would read it as
    03:30 and the booking would start an hour later than the form said."""
    from zoneinfo import ZoneInfo

    from board.errors import Unprocessable
    from board.web.reservation_routes import _parse_local

    berlin = ZoneInfo("Europe/Berlin")
    with pytest.raises(Unprocessable, match="clocks skip it"):
        _parse_local("start", "2027-03-28T02:30", berlin)
    assert _parse_local("start", "2027-03-28T03:30", berlin).utcoffset() == timedelta(hours=2)
    # The autumn hour that happens twice is the first of the two, as zoneinfo reads it.
    assert _parse_local("start", "2027-10-31T02:30", berlin).utcoffset() == timedelta(hours=2)
