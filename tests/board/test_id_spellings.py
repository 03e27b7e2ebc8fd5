"""Ids in the paths and bodies of the API and the pages, in every spelling uuid.UUID
reads (upper case, braces, `urn:uuid:`, no hyphens): answered, found and audited in their
canonical form; anything else that is no id is refused with a sentence.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import httpx

from tests.board.answers import audit_rows, refused
from tests.board.builders import enroll, make_tenant, spellings
from tests.board.db import scalar
from tests.board.reservation_builders import book, busy_host
from tests.board.test_reports_builders import quick_tenant
from tests.web.helpers import admin_browser


async def test_odd_spellings_of_ids_are_answered_and_audited_in_canonical_form(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was echoed as spelled: a revoke by urn:uuid:… answered and audited that string."""
    tenant = await quick_tenant(app, "spell")
    host_id = await busy_host(app, client, tenant, "spell-node")
    booked = await book(client, tenant, host_id)
    base = f"/api/v1/workspaces/{tenant.slug}"
    for spelled in spellings(host_id):
        for url in (f"{base}/hosts/{spelled}", f"{base}/hosts/{spelled}/archives"):
            r = await client.get(url, headers=tenant.auth("finance"))
            assert r.status_code == 200, (url, r.text)
            assert r.json()["hostId"] == host_id, r.text
    for spelled in spellings(booked):
        r = await client.get(f"{base}/reservations/{spelled}", headers=tenant.auth())
        assert r.status_code == 200, r.text
        assert r.json()["reservationId"] == booked, r.text
    r = await client.post(f"{base}/hosts/urn:uuid:{host_id.upper()}/revoke", headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert r.json()["hostId"] == host_id, r.text
    target = await scalar(
        app, "SELECT target FROM audit_events WHERE action = 'host.revoked' ORDER BY id DESC"
    )
    assert target == host_id


async def test_odd_ids_in_paths_are_refused(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await quick_tenant(app, "path")
    base = f"/api/v1/workspaces/{tenant.slug}"
    odd = ["1", "-1", "0", "99999999999999999999", "%2E%2E", "..%2F..", "%ED%A0%80", "x" * 5000]
    templates = [
        ("GET", f"{base}/hosts/{{}}"),
        ("GET", f"{base}/hosts/{{}}/archives"),
        ("POST", f"{base}/hosts/{{}}/revoke"),
        ("GET", f"{base}/reservations/{{}}"),
        ("DELETE", f"{base}/reservations/{{}}"),
        ("DELETE", f"{base}/notification-channels/{{}}"),
        ("POST", f"{base}/notification-channels/{{}}/test"),
        ("POST", f"{base}/notifications/{{}}/retry"),
        ("DELETE", f"{base}/enrollment-tokens/{{}}"),
        ("DELETE", f"{base}/members/{{}}"),
        ("POST", f"{base}/members/{{}}/sign-out"),
        ("DELETE", "/api/v1/me/api-tokens/{}"),
        ("GET", "/api/v1/workspaces/{}/hosts"),
    ]
    before = await audit_rows(app, tenant.slug)
    for method, template in templates:
        for value in odd:
            r = await client.request(method, template.format(value), headers=tenant.auth())
            refused(r, 404, 405, 422)
    assert await audit_rows(app, tenant.slug) == before


async def test_the_admin_page_audits_a_host_revoke_by_its_canonical_id(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was audited as spelled: `urn:uuid:<UPPER>` landed in the log as the target."""
    tenant = await make_tenant(app, "hpspell")
    host_id = str((await enroll(client, tenant, "spell-node"))["hostId"])
    b, csrf = await admin_browser(app, tenant)
    async with aclosing(b):
        r = await b.post(
            f"/w/{tenant.slug}/admin/hosts/urn:uuid:{host_id.upper()}/revoke",
            data={"csrf_token": csrf},
        )
    assert r.status_code == 303, r.text[:300]
    target = await scalar(
        app,
        "SELECT target FROM audit_events WHERE action = 'host.revoked' ORDER BY id DESC LIMIT 1",
    )
    assert target == host_id


async def _last_target(app: Any, action: str) -> str:
    found = await scalar(
        app, "SELECT target FROM audit_events WHERE action = %s ORDER BY id DESC LIMIT 1", action
    )
    return str(found)


async def test_channel_and_booking_ids_are_audited_in_canonical_form(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was audited as spelled: `DELETE …/notification-channels/urn:uuid:…` recorded
    'urn:uuid:…' (and `{…}`, upper case), so the trail did not match the channel's id;
    the same for `…/test` and an admin's PATCH/DELETE of a member's booking."""
    tenant = await make_tenant(app, "canon")
    base = f"/api/v1/workspaces/{tenant.slug}"
    host_id = await busy_host(app, client, tenant, "canon-node")
    problems = []

    made = await client.post(
        f"{base}/notification-channels",
        json={"kind": "email", "emails": ["ops@canon.example"]},
        headers=tenant.auth(),
    )
    assert made.status_code == 201, made.text
    channel = str(made.json()["channelId"])
    spelled = spellings(channel)
    r = await client.post(f"{base}/notification-channels/{spelled[2]}/test", headers=tenant.auth())
    assert r.status_code == 202, r.text
    if (got := await _last_target(app, "notices.test_sent")) != channel:
        problems.append(f"notices.test_sent: {got!r}")
    r = await client.delete(f"{base}/notification-channels/{spelled[1]}", headers=tenant.auth())
    assert r.status_code == 204, r.text
    if (got := await _last_target(app, "notices.channel_removed")) != channel:
        problems.append(f"notices.channel_removed: {got!r}")

    booked = await book(client, tenant, host_id, memberEmail="member@canon.example")
    r = await client.patch(
        f"{base}/reservations/{booked.upper()}", json={"note": "moved"}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    if (got := await _last_target(app, "reservation.update_for_member")) != booked:
        problems.append(f"reservation.update_for_member: {got!r}")
    r = await client.delete(f"{base}/reservations/urn:uuid:{booked}", headers=tenant.auth())
    assert r.status_code == 204, r.text
    if (got := await _last_target(app, "reservation.cancel_for_member")) != booked:
        problems.append(f"reservation.cancel_for_member: {got!r}")
    # The removed channel, in any spelling, is a 404 from then on.
    refused(
        await client.delete(f"{base}/notification-channels/{spelled[3]}", headers=tenant.auth()),
        404,
    )
    assert not problems, "audited as spelled, not canonical:\n" + "\n".join(problems)
