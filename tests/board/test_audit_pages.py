"""The audit log of the admin page: each admin action of the page is recorded and listed."""

from __future__ import annotations

import re

from tests.board.builders import enroll, make_tenant
from tests.web.helpers import csrf_of, sign_in


async def test_each_admin_page_action_is_recorded_and_listed(app, client) -> None:
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    host = await enroll(client, acme, "gpu-07")
    assert (await sign_in(client, "admin@acme.example")).status_code == 303
    admin = "/w/acme/admin"
    page = await client.get(admin)
    assert 'id="audit-link"' in page.text
    csrf = csrf_of(page.text)

    issued = await client.post(f"{admin}/enrollment-tokens", data={"csrf_token": csrf})
    assert issued.status_code == 201
    tokens = await client.get("/api/v1/workspaces/acme/enrollment-tokens", headers=acme.auth())
    prefix = next(
        t["tokenPrefix"] for t in tokens.json()["enrollmentTokens"] if t["state"] == "active"
    )
    steps = [
        (f"{admin}/enrollment-tokens/{prefix}/revoke", {}),
        (f"{admin}/hosts/{host['hostId']}/revoke", {}),
        (
            f"{admin}/members",
            {"email": "dana@acme.example", "role": "member", "password": "long-password-1"},
        ),
        (f"{admin}/members", {"email": "dana@acme.example", "role": "finance"}),
        (f"{admin}/members/dana@acme.example/sign-out", {}),
        (f"{admin}/members/dana@acme.example/remove", {}),
        (f"{admin}/settings", {"retentionDays": "90", "timezone": "UTC"}),
    ]
    for url, form in steps:
        r = await client.post(url, data={"csrf_token": csrf, **form})
        assert r.status_code in (201, 303), (url, r.status_code, r.text[:300])

    listed = await client.get(f"{admin}/audit")
    assert listed.status_code == 200
    expected = [
        "signin.succeeded",
        "enrollment_token.issued",
        "enrollment_token.revoked",
        "host.revoked",
        "member.added",
        "member.role_changed",
        "member.signed_out",
        "member.removed",
        "settings.changed",
    ]
    for action in expected:
        assert f'data-action="{action}"' in listed.text, action
    assert "long-password-1" not in listed.text
    # Prefixes name tokens safely; a secret (prefix, "_", random part) never appears.
    assert not re.search(r"gua_[a-z]+_[0-9a-f]{8}_", listed.text)
    api = await client.get("/api/v1/workspaces/acme/audit-log", headers=acme.auth())
    actions = [e["action"] for e in reversed(api.json()["events"])]
    assert [a for a in actions if a != "enrollment_token.issued"][-7:] == expected[2:]
    # A shorter retention is recorded from what to what, from where; the page says the
    # log is still kept the board's minimum (400 days), not the workspace's 90.
    changed = next(e for e in api.json()["events"] if e["action"] == "settings.changed")
    assert changed["detail"]["retention_days"] == 90
    assert changed["detail"]["previous_retention_days"] == 400
    assert all(e["clientAddress"] == "127.0.0.1" for e in api.json()["events"])
    assert "(400 days:" in listed.text

    # Not an admin of another workspace: its audit page is not found.
    assert (await client.get("/w/other/admin/audit")).status_code == 404
    assert other.slug == "other"
    # A bad cursor is a readable refusal, not a 500.
    assert (await client.get(f"{admin}/audit?cursor=abc")).status_code == 422


async def test_members_cannot_see_the_audit_page(app, client) -> None:
    await make_tenant(app, "acme")
    assert (await sign_in(client, "member@acme.example")).status_code == 303
    assert (await client.get("/w/acme/admin/audit")).status_code == 403
