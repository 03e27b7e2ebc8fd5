"""Budgets and team contacts refuse bad input with a 4xx and a sentence, and stay inside
their workspace: another workspace's admin gets a 404, a member or finance may read
but not set, nothing refused is stored or audited."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.board.answers import audit_rows, refused
from tests.board.budget_builders import put_budget, set_team
from tests.board.builders import JSON
from tests.board.db import scalar
from tests.board.money_builders import base
from tests.board.test_reports_builders import quick_tenant

GOOD = {"period": "month", "gpuHours": 10, "from": "2026-12-01"}


async def _tenant(app: Any, client: httpx.AsyncClient) -> Any:
    tenant = await quick_tenant(app, "bin")
    await set_team(client, tenant, "alice", "vision")
    return tenant


async def _count(app: Any) -> int:
    return int(await scalar(app, "SELECT count(*) FROM budgets"))


BAD_BODIES = [
    {**GOOD, "gpuHours": -1},
    {**GOOD, "amount": -0.01},
    {**GOOD, "gpuHours": 1e9},
    {**GOOD, "amount": 10**13},
    {**GOOD, "gpuHours": "1e400"},
    {**GOOD, "gpuHours": 1.1234567},
    {**GOOD, "gpuHours": "ten"},
    {**GOOD, "gpuHours": True},
    {**GOOD, "period": "week"},
    {**GOOD, "period": None},
    {**GOOD, "from": "2026-13-01"},
    {**GOOD, "from": "1999-12-31"},
    {**GOOD, "from": "2026-12"},
    {**GOOD, "extra": 1},
    {"period": "month", "gpuHours": 1},
    [],
    "text",
]


@pytest.mark.parametrize("body", BAD_BODIES, ids=[str(i) for i in range(len(BAD_BODIES))])
async def test_a_bad_budget_is_a_422_with_a_sentence(
    app: Any, client: httpx.AsyncClient, body: Any
) -> None:
    tenant = await _tenant(app, client)
    audited = await audit_rows(app, tenant.slug)
    r = await client.put(f"{base(tenant)}/budgets/vision", json=body, headers=tenant.auth())
    refused(r, 422)
    assert await _count(app) == 0
    assert await audit_rows(app, tenant.slug) == audited


@pytest.mark.parametrize(
    "raw",
    [
        b'{"period": "month", "gpuHours": NaN, "from": "2026-12-01"}',
        b'{"period": "month", "amount": Infinity, "from": "2026-12-01"}',
        b'{"period": "month", "gpuHours": -Infinity, "from": "2026-12-01"}',
    ],
)
async def test_nan_and_infinity_are_refused(
    app: Any, client: httpx.AsyncClient, raw: bytes
) -> None:
    tenant = await _tenant(app, client)
    r = await client.put(
        f"{base(tenant)}/budgets/vision", content=raw, headers={**tenant.auth(), **JSON}
    )
    refused(r, 422)
    assert await _count(app) == 0


async def test_team_names_unknown_too_long_or_odd(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await _tenant(app, client)
    url = f"{base(tenant)}/budgets"
    detail = refused(await client.put(f"{url}/nobody", json=GOOD, headers=tenant.auth()), 404)
    assert "nobody" in detail
    assert "directory" in detail
    refused(await client.put(f"{url}/{'t' * 101}", json=GOOD, headers=tenant.auth()), 422)
    refused(await client.put(f"{url}/a%E2%80%AEb", json=GOOD, headers=tenant.auth()), 422)
    # A line break never reaches a route (no path matches it): a 404 with a sentence.
    refused(await client.put(f"{url}/a%0Ab", json=GOOD, headers=tenant.auth()), 404, 422)
    # A name with a slash is still one team (the last part of the path).
    await set_team(client, tenant, "bob", "ml/vision")
    assert (await put_budget(client, tenant, "ml/vision", **GOOD))["team"] == "ml/vision"
    # 100 characters is the directory's own limit, and fits.
    long = "t" * 100
    await set_team(client, tenant, "carol", long)
    assert (await put_budget(client, tenant, long, **GOOD))["team"] == long
    assert await _count(app) == 2


@pytest.mark.parametrize(
    "period",
    [
        "2026-13",
        "2026-00",
        "2026-Q0",
        "2026-Q5",
        "26-12",
        "2026-12-01",
        "2026/12",
        "١٢٠٢-٢١",
        "1999-12",
        "2101-Q1",
        "x" * 41,
        "2026-1",
        " 2026-Q4x",
        "month",
    ],
)
async def test_bad_period_strings(app: Any, client: httpx.AsyncClient, period: str) -> None:
    tenant = await _tenant(app, client)
    r = await client.get(
        f"{base(tenant)}/reports/budgets", params={"period": period}, headers=tenant.auth()
    )
    refused(r, 422)


async def test_bad_format_is_a_422(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await _tenant(app, client)
    r = await client.get(
        f"{base(tenant)}/reports/budgets",
        params={"period": "2026-Q4", "format": "xlsx"},
        headers=tenant.auth(),
    )
    assert "format" in refused(r, 422)


async def test_roles_and_tenancy(app: Any, client: httpx.AsyncClient) -> None:
    a = await _tenant(app, client)
    b = await _tenant(app, client)
    await put_budget(client, b, "vision", **GOOD)
    # A's admin cannot read or set B's budgets: B is not theirs (404, never a 403).
    for r in (
        await client.put(f"{base(b)}/budgets/vision", json=GOOD, headers=a.auth()),
        await client.get(f"{base(b)}/budgets", headers=a.auth()),
        await client.get(f"{base(b)}/reports/budgets", headers=a.auth()),
        await client.put(
            f"{base(b)}/directory/teams/vision",
            json={"contactEmail": "x@a.example"},
            headers=a.auth(),
        ),
    ):
        refused(r, 404)
    # Nor does A see B's budget in its own report or list.
    mine = (await client.get(f"{base(a)}/reports/budgets", headers=a.auth())).json()
    assert all(row["budgetGpuHours"] is None for row in mine["rows"])
    assert (await client.get(f"{base(a)}/budgets", headers=a.auth())).json()["budgets"] == []
    # Members and finance read; only admins set.
    for role in ("member", "finance"):
        refused(await client.put(f"{base(a)}/budgets/vision", json=GOOD, headers=a.auth(role)), 403)
        assert (
            await client.get(f"{base(a)}/reports/budgets", headers=a.auth(role))
        ).status_code == 200
    refused(await client.get(f"{base(a)}/reports/budgets"), 401)
    assert await _count(app) == 1


async def test_a_team_contact_is_an_address_mail_can_go_to(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await _tenant(app, client)
    url = f"{base(tenant)}/directory/teams"
    r = await client.put(
        f"{url}/vision", json={"contactEmail": " Leads@Vision.Example "}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"team": "vision", "contactEmail": "leads@vision.example", "linuxUsers": 1}
    # A team named ahead by its contact alone.
    r = await client.put(
        f"{url}/audio", json={"contactEmail": "a@lab.example"}, headers=tenant.auth()
    )
    assert r.json() == {"team": "audio", "contactEmail": "a@lab.example", "linuxUsers": 0}
    listed = (await client.get(f"{base(tenant)}/directory", headers=tenant.auth("member"))).json()
    assert listed["teams"] == [
        {"team": "audio", "contactEmail": "a@lab.example", "linuxUsers": 0},
        {"team": "vision", "contactEmail": "leads@vision.example", "linuxUsers": 1},
    ]
    # It is a team for budgets now too.
    await put_budget(client, tenant, "audio", **GOOD)
    for bad in ("not-an-address", "a<b>@x.example", "a,b@x.example", "a@b@c", "x" * 330 + "@a.b"):
        refused(
            await client.put(f"{url}/vision", json={"contactEmail": bad}, headers=tenant.auth()),
            422,
        )
    for body in ({}, {"contactEmail": 3}, {"contactEmail": "a@b.c", "more": 1}):
        refused(await client.put(f"{url}/vision", json=body, headers=tenant.auth()), 422)
    refused(
        await client.put(f"{url}/{'t' * 101}", json={"contactEmail": None}, headers=tenant.auth()),
        422,
    )
    refused(
        await client.put(
            f"{url}/vision", json={"contactEmail": None}, headers=tenant.auth("member")
        ),
        403,
    )
    # Cleared: the team stays while an entry names it; "audio" goes with its contact.
    r = await client.put(f"{url}/vision", json={"contactEmail": None}, headers=tenant.auth())
    assert r.json() == {"team": "vision", "contactEmail": None, "linuxUsers": 1}
    r = await client.put(f"{url}/audio", json={"contactEmail": None}, headers=tenant.auth())
    assert r.json() == {"team": "audio", "contactEmail": None, "linuxUsers": 0}
    listed = (await client.get(f"{base(tenant)}/directory", headers=tenant.auth())).json()
    assert [t["team"] for t in listed["teams"]] == ["vision"]
    actions = await scalar(
        app, "SELECT count(*) FROM audit_events WHERE action = 'directory.team_put'"
    )
    assert actions == 4
