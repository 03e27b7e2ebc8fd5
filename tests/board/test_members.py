"""Members as admins manage them: a workspace always keeps an admin (a re-add that
demotes the only one is refused; two admins stepping down at once leave one), and the
member removed is the one named, whatever characters their email holds.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.board.answers import refused
from tests.board.db import scalar
from tests.board.test_reports_builders import quick_tenant


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
