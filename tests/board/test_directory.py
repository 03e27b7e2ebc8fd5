"""The directory: Linux users seen on the hosts, linked to members and teams by admins;
names that are no Linux user (a trailing newline, `unknown`) refused; a member's removal
unlinks their Linux users."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.board.answers import refused
from tests.board.builders import enroll, make_tenant, push
from tests.board.db import execute, scalar
from tests.board.reservation_builders import busy_host, reservations, soon
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
)
from tests.web.helpers import sign_in


def _url(tenant, rest: str = "") -> str:
    return f"/api/v1/workspaces/{tenant.slug}/directory{rest}"


async def test_seen_users_and_entries_made_ahead(app, client) -> None:
    tenant = await quick_tenant(app, "dir")
    other = await quick_tenant(app, "dir")
    host = await enroll(client, tenant, "node")
    at = days_ago_midnight(1) + timedelta(hours=3)
    for i in range(3):
        body = observation(at + timedelta(seconds=30 * i), [gpu(0, util=50, procs=[proc("alice")])])
        assert (await push(client, host["agentToken"], body)).status_code == 202
    r = await client.put(
        _url(tenant, "/newcomer"),
        json={"memberEmail": f"member@{tenant.slug}.example", "team": "vision"},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    assert r.json() == {
        "linuxUser": "newcomer",
        "memberEmail": f"member@{tenant.slug}.example",
        "team": "vision",
        "firstSeenAt": None,
        "lastSeenAt": None,
    }
    listed = (await client.get(_url(tenant), headers=tenant.auth("finance"))).json()["entries"]
    alice = next(e for e in listed if e["linuxUser"] == "alice")
    assert alice["firstSeenAt"] == at.replace(minute=0).isoformat()
    assert alice["memberEmail"] is None
    assert {e["linuxUser"] for e in listed} == {"alice", "newcomer"}
    # Another workspace sees none of it.
    assert (await client.get(_url(other), headers=other.auth())).json()["entries"] == []
    assert (await client.get(_url(tenant), headers=other.auth())).status_code == 404
    # A booking by that member counts its linked accounts by default.
    r = await client.put(
        _url(tenant, "/alice"),
        json={"memberEmail": f"member@{tenant.slug}.example", "team": None},
        headers=tenant.auth(),
    )
    assert r.status_code == 200
    assert r.json()["firstSeenAt"] is not None


async def test_bad_directory_input(app, client) -> None:
    tenant = await quick_tenant(app, "dir")
    ok = {"memberEmail": None, "team": "ml"}
    for path, body, role, status in [
        ("/alice", ok, "member", 403),
        ("/alice", ok, "finance", 403),
        ("/al%20ice", ok, "admin", 422),
        ("/" + "a" * 70, ok, "admin", 422),
        ("/alice", {"memberEmail": "stranger@example.com", "team": None}, "admin", 422),
        ("/alice", {"memberEmail": None, "team": "x" * 101}, "admin", 422),
        ("/alice", {"memberEmail": None, "team": "a\u0000b"}, "admin", 422),
        ("/alice", {"memberEmail": None, "team": "ml\u007f"}, "admin", 422),
        # A right-to-left override makes "ml\u202egnp" read "mlpng" on the pages.
        ("/alice", {"memberEmail": None, "team": "ml\u202egnp"}, "admin", 422),
        ("/alice", {"memberEmail": None, "team": "\u2066ml\u2069"}, "admin", 422),
        ("/alice", {"team": "ml", "extra": 1}, "admin", 422),
    ]:
        r = await client.put(_url(tenant, path), json=body, headers=tenant.auth(role))
        assert r.status_code == status, (path, body, r.text)
        assert isinstance(r.json()["detail"], str)
    assert (await client.get(_url(tenant), headers=tenant.auth())).json()["entries"] == []


async def test_each_refused_team_says_what_is_wrong(app, client) -> None:
    """A bidi override or a line break in a team used to be refused as "must not contain
    NUL": every refusal named the one pattern the agent payloads use."""
    tenant = await quick_tenant(app, "dir")
    for team, words in [
        ("ml\u202egnp", "bidirectional control characters"),
        ("\u2066ml\u2069", "bidirectional control characters"),
        ("vision\nteam", "line breaks"),
        ("a\u0000b", "control characters"),
    ]:
        r = await client.put(
            _url(tenant, "/alice"), json={"memberEmail": None, "team": team}, headers=tenant.auth()
        )
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert isinstance(detail, str)
        assert detail.startswith("team: must not contain"), detail
        assert words in detail, (team, detail)
        assert "NUL" not in detail, (team, detail)


async def test_the_directory_page_says_who_runs_now(app, client) -> None:
    """lastSeenAt is an hour's start: a user at work now read "last seen 49 min ago"."""
    tenant = await make_tenant(app, "acme")
    fresh = await enroll(client, tenant, "fresh")
    gone = await enroll(client, tenant, "gone")
    now = datetime.now(UTC).replace(microsecond=0)
    earlier = [gpu(0, util=50, procs=[proc("alice")]), gpu(1, util=50, procs=[proc("bob")])]
    for at, gpus in ((now - timedelta(seconds=60), earlier), (now, earlier[:1])):
        assert (await push(client, fresh["agentToken"], observation(at, gpus))).status_code == 202
    # A stale host's newest observation says nothing about now.
    for seconds in (7260, 7200):
        body = observation(
            now - timedelta(seconds=seconds), [gpu(0, util=50, procs=[proc("carol")])]
        )
        assert (await push(client, gone["agentToken"], body)).status_code == 202
    await sign_in(client, "admin@acme.example")
    page = await client.get("/w/acme/admin/directory")
    assert page.status_code == 200, page.text

    def last_seen(user: str) -> str:
        row = re.search(rf'<tr data-linux-user="{user}">.*?</tr>', page.text, re.S)
        assert row, user
        cell = re.search(r'data-label="Last seen">(.*?)</td>', row.group(0), re.S)
        assert cell, user
        return re.sub(r"<[^>]+>", "", cell.group(1)).strip()

    assert last_seen("alice") == "running now"
    assert last_seen("bob") != "running now"  # on the host a minute ago, not in its newest
    assert last_seen("carol").endswith("ago")


async def test_directory_refuses_a_linux_user_with_a_trailing_newline(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was stored: re.match lets "$" match before a final newline."""
    tenant = await quick_tenant(app, "dir")
    base = f"/api/v1/workspaces/{tenant.slug}/directory"
    body = {"memberEmail": None, "team": "ml"}
    for name in ("alice%0A", "alice%0D", "%0A", "-bob", "a" * 65, "%2E%2E", "al%20ice"):
        refused(await client.put(f"{base}/{name}", json=body, headers=tenant.auth()), 404, 422)
    for team in (" \t ", "x\ny", "a\u0000", "t" * 101):
        r = await client.put(
            f"{base}/carol", json={"memberEmail": None, "team": team}, headers=tenant.auth()
        )
        refused(r, 422)
    r = await client.get(base, headers=tenant.auth())
    assert r.json()["entries"] == [], r.text
    # A trailing $ is a real (Samba machine) account name.
    r = await client.put(f"{base}/host01$", json=body, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert r.json()["linuxUser"] == "host01$", r.text


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
