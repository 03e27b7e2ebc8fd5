"""Members as admins manage them: a workspace always keeps an admin (a re-add that
demotes the only one is refused; two admins stepping down at once leave one), and the
member removed is the one named, whatever characters their email holds.
"""

from __future__ import annotations

import re
from html import unescape
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.board.answers import refused
from tests.board.builders import make_tenant
from tests.board.db import scalar
from tests.board.test_reports_builders import quick_tenant
from tests.web.helpers import csrf_of, sign_in


async def test_the_only_admin_cannot_be_demoted_by_a_re_add(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 201: re-adding the only admin as a member left the workspace with no admin
    (and ended the admin's token), which DELETE …/members/{email} refuses with a 409."""
    tenant = await quick_tenant(app, "demote")
    base = f"/api/v1/workspaces/{tenant.slug}"
    admin = f"admin@{tenant.slug}.example"
    for role in ("member", "finance"):
        r = await client.post(
            f"{base}/members",
            json={"email": f" {admin.upper()} ", "role": role},
            headers=tenant.auth(),
        )
        assert "only admin" in refused(r, 409)
    r = await client.get(f"{base}/members", headers=tenant.auth())
    assert r.status_code == 200, r.text  # the admin's token still works
    assert {m["email"]: m["role"] for m in r.json()["members"]}[admin] == "admin"
    # With a second admin, the first may step down.
    second = await client.post(
        f"{base}/members",
        json={"email": f"member@{tenant.slug}.example", "role": "admin"},
        headers=tenant.auth(),
    )
    assert second.status_code == 201, second.text
    r = await client.post(
        f"{base}/members", json={"email": admin, "role": "member"}, headers=tenant.auth()
    )
    assert r.status_code == 201, r.text
    assert r.json()["role"] == "member"


async def test_two_admins_stepping_down_at_once_leave_one(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Each counted the other as the admin who stays; the admins' rows are now locked,
    so the second waits for the first and then sees itself as the last one."""
    import asyncio

    from board.errors import Conflict
    from board.runtime import Runtime
    from board.workspaces import service as workspaces

    tenant = await quick_tenant(app, "race")
    base = f"/api/v1/workspaces/{tenant.slug}"
    second = f"member@{tenant.slug}.example"
    r = await client.post(
        f"{base}/members", json={"email": second, "role": "admin"}, headers=tenant.auth()
    )
    assert r.status_code == 201, r.text
    runtime: Runtime = app.state.runtime

    written = asyncio.Event()

    async def step_down(email: str, hold: asyncio.Event | None) -> None:
        async with runtime.sessions() as session:
            workspace = await workspaces.get_workspace(session, tenant.slug)
            await workspaces.add_member(session, workspace, email, "member", None)
            if hold is not None:
                written.set()  # demoted in this transaction, not committed yet
                await hold.wait()
            await session.commit()

    release = asyncio.Event()
    first = asyncio.create_task(step_down(f"admin@{tenant.slug}.example", release))
    await asyncio.wait_for(written.wait(), timeout=60)
    deadline = asyncio.get_running_loop().time() + 60
    later = asyncio.create_task(step_down(second, None))
    while not later.done() and not await scalar(
        app,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()",
    ):
        assert asyncio.get_running_loop().time() < deadline, "the second never waited"
        await asyncio.sleep(0.02)
    release.set()
    await first
    with pytest.raises(Conflict):
        await later
    admins = await scalar(
        app,
        "SELECT count(*) FROM memberships m JOIN workspaces w ON w.id = m.workspace_id "
        "WHERE w.slug = %s AND m.role = 'admin'",
        tenant.slug,
    )
    assert admins == 1


_REMOVE = re.compile(
    r'<form method="post" action="([^"]+)" class="inline">\s*<input[^>]*>\s*'
    r'<button type="submit" class="danger" aria-label="Remove ([^"]+) from this workspace">'
)


_SIGN_OUT = re.compile(
    r'<form method="post" action="([^"]+)" class="inline">\s*<input[^>]*>\s*'
    r'<button type="submit" aria-label="Sign ([^"]+) out everywhere">'
)


async def members_of(client: httpx.AsyncClient, slug: str, auth: dict[str, str]) -> set[str]:
    r = await client.get(f"/api/v1/workspaces/{slug}/members", headers=auth)
    assert r.status_code == 200, r.text
    return {m["email"] for m in r.json()["members"]}


def buttons(html: str, pattern: re.Pattern[str]) -> dict[str, str]:
    """Each member's button's form action, by the member it names."""
    return {unescape(who): unescape(action) for action, who in pattern.findall(html)}


async def test_a_member_whose_email_holds_a_slash_is_the_one_removed(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was: a member whose email holds a "/" (which the board takes: `x/y@lab.example`)
    could not be removed or signed out, on the admin page or through the API (404: the page
    wrote the email into its form's path with Jinja's `urlencode`, which leaves "/" as it
    is, and the routes' `{email}` never matches a "/"). Worse, the Remove button of a member
    named `z/../member@lab.example` posted to `…/members/z/../member@…/remove`, which every
    browser (and httpx) resolves to `…/members/member@…/remove`: the admin who removed one
    person removed another."""
    tenant = await make_tenant(app, "slash")
    slug = tenant.slug
    slashed, dotted, by_api = (
        "x/y@slash.example",
        "z/../member@slash.example",
        "p/q@slash.example",
    )
    for email in (slashed, dotted, by_api):
        r = await client.post(
            f"/api/v1/workspaces/{slug}/members",
            json={"email": email, "role": "member"},
            headers=tenant.auth(),
        )
        assert r.status_code == 201, r.text
    assert (await sign_in(client, "admin@slash.example")).status_code == 303
    page = await client.get(f"/w/{slug}/admin")
    assert page.status_code == 200, page.text
    csrf = csrf_of(page.text)
    removes = buttons(page.text, _REMOVE)
    sign_outs = buttons(page.text, _SIGN_OUT)
    assert {slashed, dotted} <= set(removes), removes

    problems = []
    # The dotted member's Remove button removes that member, and nobody else.
    r = await client.post(removes[dotted], data={"csrf_token": csrf})
    left = await members_of(client, slug, tenant.auth())
    if "member@slash.example" not in left:
        problems.append(
            f"Remove of {dotted!r} (POST {removes[dotted]}: {r.status_code}) "
            "removed member@slash.example instead"
        )
    if dotted in left:
        problems.append(f"Remove of {dotted!r} left it a member ({r.status_code})")
    # The slashed member can be signed out everywhere and removed from the page.
    r = await client.post(sign_outs[slashed], data={"csrf_token": csrf})
    if r.status_code != 303:
        problems.append(f"Sign out of {slashed!r}: POST {sign_outs[slashed]} {r.status_code}")
    r = await client.post(removes[slashed], data={"csrf_token": csrf})
    if r.status_code != 303 or slashed in await members_of(client, slug, tenant.auth()):
        problems.append(f"Remove of {slashed!r}: POST {removes[slashed]} {r.status_code}")
    # And through the API, with the "/" percent-encoded as a client must send it.
    path = f"/api/v1/workspaces/{slug}/members/{quote(by_api, safe='')}"
    r = await client.post(f"{path}/sign-out", headers=tenant.auth())
    if r.status_code != 204:
        problems.append(f"API sign-out of {by_api!r}: {r.status_code} {r.text[:100]}")
    r = await client.delete(path, headers=tenant.auth())
    if r.status_code != 204 or by_api in await members_of(client, slug, tenant.auth()):
        problems.append(f"API DELETE of {by_api!r}: {r.status_code} {r.text[:100]}")
    assert not problems, "\n".join(problems)
