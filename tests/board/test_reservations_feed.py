"""The secret calendar feed URL: shown once, hashed, replaced, revoked, bound to a member
and one workspace, and never written to a log.

Also attacked, and held: lone CRs, bidi and 4-byte characters in notes and host names
(escaped and folded on character boundaries), a database whose session zone is not UTC
(the feed still writes UTC times).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg

from board.db.urls import libpq_url
from tests.board.answers import refused
from tests.board.builders import enroll, make_tenant, push
from tests.board.reservation_builders import book
from tests.board.test_reports_builders import gpu, observation, quick_tenant


async def _booked(client, tenant) -> str:
    host = await enroll(client, tenant, "node")
    r = await push(client, host["agentToken"], observation(datetime.now(UTC), [gpu(0)]))
    assert r.status_code == 202
    start = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(hours=1)
    made = await client.post(
        f"/api/v1/workspaces/{tenant.slug}/reservations",
        json={
            "hostId": host["hostId"],
            "start": start.isoformat(),
            "end": (start + timedelta(hours=1)).isoformat(),
            "note": "feed check",
        },
        headers=tenant.auth("member"),
    )
    assert made.status_code == 201, made.text
    return str(made.json()["reservationId"])


def _path(feed_url: str) -> str:
    parts = urlsplit(feed_url)
    return f"{parts.path}?{parts.query}"


async def test_feed_url_works_without_a_header_and_is_revocable(app, client, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    tenant = await make_tenant(app, "feed")
    booking = await _booked(client, tenant)
    url = f"/api/v1/workspaces/{tenant.slug}/calendar-feed"
    issued = await client.post(url, headers=tenant.auth("finance"))
    assert issued.status_code == 201, issued.text
    body = issued.json()
    token = parse_qs(urlsplit(body["feedUrl"]).query)["token"][0]
    assert token.startswith(body["tokenPrefix"])
    assert urlsplit(body["feedUrl"]).path == "/api/v1/calendar/reservations.ics"

    feed = await client.get(_path(body["feedUrl"]))  # no Authorization header
    assert feed.status_code == 200
    assert feed.headers["content-type"].startswith("text/calendar")
    assert f"{booking}@gua-board" in feed.text
    assert token not in feed.text

    # Only the hash is stored; the secret is in no log line.
    async with await psycopg.AsyncConnection.connect(
        libpq_url(app.state.runtime.database_url)
    ) as conn:
        cur = await conn.execute("SELECT token_hash, token_prefix FROM calendar_feed_tokens")
        (stored_hash, prefix), *_ = await cur.fetchall()
    assert token.encode() not in bytes(stored_hash)
    assert prefix == body["tokenPrefix"]
    # (the test's own HTTP client logs the URLs it fetches; the board never does)
    board_lines = [r.getMessage() for r in caplog.records if not r.name.startswith("httpx")]
    assert not [line for line in board_lines if token in line]

    # A new URL replaces the old one; a revoked one is gone; each answers 404.
    again = (await client.post(url, headers=tenant.auth("finance"))).json()
    assert (await client.get(_path(body["feedUrl"]))).status_code == 404
    assert (await client.get(_path(again["feedUrl"]))).status_code == 200
    assert (await client.delete(url, headers=tenant.auth("finance"))).status_code == 204
    assert (await client.get(_path(again["feedUrl"]))).status_code == 404
    assert (await client.delete(url, headers=tenant.auth("finance"))).status_code == 404


async def test_feed_is_one_workspaces_and_ends_with_the_membership(app, client) -> None:
    tenant = await make_tenant(app, "feed")
    other = await make_tenant(app, "feed-other")
    mine = await _booked(client, tenant)
    theirs = await _booked(client, other)
    issued = await client.post(
        f"/api/v1/workspaces/{tenant.slug}/calendar-feed", headers=tenant.auth("member")
    )
    path = _path(issued.json()["feedUrl"])
    feed = await client.get(path)
    assert mine in feed.text
    assert theirs not in feed.text
    # Another workspace's token route needs that workspace's membership.
    r = await client.post(
        f"/api/v1/workspaces/{other.slug}/calendar-feed", headers=tenant.auth("member")
    )
    assert r.status_code in (403, 404)

    removed = await client.delete(
        f"/api/v1/workspaces/{tenant.slug}/members/member@{tenant.slug}.example",
        headers=tenant.auth(),
    )
    assert removed.status_code in (200, 204), removed.text
    assert (await client.get(path)).status_code == 404


async def test_bad_feed_tokens_are_404_or_422(app, client) -> None:
    await make_tenant(app, "feed")
    base = "/api/v1/calendar/reservations.ics"
    for query in ("", "?token=", "?token=gua_cal_00000000_nope", "?token=gua_pat_1_x"):
        r = await client.get(base + query)
        assert r.status_code == 404, query
        assert isinstance(r.json()["detail"], str)
    assert (await client.get(base + "?token=" + "a" * 500)).status_code == 422
    no_auth = await client.post("/api/v1/workspaces/feed/calendar-feed")
    assert no_auth.status_code == 401


async def test_calendar_feed_escapes_names_and_notes(app: Any, client: httpx.AsyncClient) -> None:
    """Newlines, commas, semicolons and backslashes in a host's name or a note stay text:
    no line of the feed is a property the booker wrote."""
    tenant = await quick_tenant(app, "ics")
    base = f"/api/v1/workspaces/{tenant.slug}"
    preset = "node;a,b\r\nX-INJECTED-NAME:1\\"
    issued = await client.post(
        f"{base}/enrollment-tokens", json={"displayName": preset}, headers=tenant.auth()
    )
    claimed = await client.post(
        "/agent/v1/enrollments/claim",
        json={"enrollmentToken": issued.json()["enrollmentToken"], "hostname": "h"},
    )
    host = claimed.json()
    r = await push(client, host["agentToken"], observation(datetime.now(UTC), [gpu(0)]))
    assert r.status_code == 202, r.text
    note = "line one\r\nEND:VEVENT\r\nBEGIN:VEVENT\r\nX-INJECTED-NOTE:1;x,y"
    await book(client, tenant, host["hostId"], note=note)
    feed = await client.post(f"{base}/calendar-feed", headers=tenant.auth("member"))
    secret_path = "/" + feed.json()["feedUrl"].split("/", 3)[3]
    for r in (
        await client.get(f"{base}/reservations.ics", headers=tenant.auth()),
        await client.get(secret_path),
    ):
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/calendar")
        lines = r.text.split("\r\n")
        assert not [x for x in lines if x.startswith("X-INJECTED")], r.text
        assert sum(x == "BEGIN:VEVENT" for x in lines) == 1, r.text
        assert "\n" not in r.text.replace("\r\n", ""), "a bare newline in the feed"
        unfolded = r.text.replace("\r\n ", "")
        assert "X-INJECTED-NAME:1\\\\" in unfolded, unfolded
        assert "\\;a\\,b" in unfolded, unfolded
    # A guessed, repeated or oversized feed token opens nothing.
    for query in (
        "token=gua_cal_00000000_" + "x" * 43,
        "token=" + "x" * 5000,
        "token=%ED%A0%80",
        "",
    ):
        refused(await client.get(f"{secret_path.split('?')[0]}?{query}"), 404, 422)


async def test_a_feed_url_of_a_removed_member_stays_dead_when_they_are_added_again(
    app: Any, client: Any
) -> None:
    """Removal made the feed URL a 404 only through the membership join: adding the
    person again (the usual way to cut off a leaked URL, or just a later re-hire) brought
    the old URL back to life."""
    acme = await make_tenant(app, "acme")
    issued = await client.post("/api/v1/workspaces/acme/calendar-feed", headers=acme.auth("member"))
    assert issued.status_code == 201, issued.text
    token = parse_qs(urlsplit(issued.json()["feedUrl"]).query)["token"][0]
    feed = "/api/v1/calendar/reservations.ics"
    assert (await client.get(feed, params={"token": token})).status_code == 200
    members = "/api/v1/workspaces/acme/members"
    removed = await client.delete(f"{members}/member@acme.example", headers=acme.auth())
    assert removed.status_code in (200, 204), removed.text
    assert (await client.get(feed, params={"token": token})).status_code == 404
    again = await client.post(
        members, json={"email": "member@acme.example", "role": "member"}, headers=acme.auth()
    )
    assert again.status_code == 201, again.text
    revived = await client.get(feed, params={"token": token})
    assert revived.status_code == 404, "the old feed URL works again after a re-add"
    # The person's new URL works.
    fresh = await client.post(
        "/api/v1/workspaces/acme/calendar-feed",
        headers={"Authorization": f"Bearer {again.json()['apiToken']}"},
    )
    new_token = parse_qs(urlsplit(fresh.json()["feedUrl"]).query)["token"][0]
    assert (await client.get(feed, params={"token": new_token})).status_code == 200
