"""The budgets page over plain HTTP: refusals drawn in the form's page with their
sentence (nothing stored), roles, another workspace's page, the CSV with the page's
sign-in, the usage page's team shares, and a team's contact refused on the directory
page."""

from __future__ import annotations

from typing import Any

import httpx

from tests.board.budget_builders import put_budget, set_team
from tests.board.builders import make_tenant
from tests.board.db import scalar
from tests.web.helpers import admin_browser, browser, csrf_of, sign_in, signed_in


async def _form(b: httpx.AsyncClient, slug: str) -> str:
    page = await b.get(f"/w/{slug}/budgets")
    assert page.status_code == 200, page.text[:300]
    return csrf_of(page.text)


async def test_a_refused_budget_is_drawn_with_its_sentence(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await signed_in(app, client, "bpage")
    await set_team(client, tenant, "alice", "vision")
    b, _ = await admin_browser(app, tenant)
    try:
        csrf = await _form(b, tenant.slug)
        good = {"csrf_token": csrf, "team": "vision", "kind": "month", "from": "2026-12-01"}
        for bad, words in (
            ({"gpu_hours": "-1"}, "gpuHours"),
            ({"amount": "NaN"}, "amount"),
            ({"gpu_hours": "1e12"}, "gpuHours"),
            ({"kind": "week"}, "period"),
            ({"from": "2026-02-30"}, "from"),
            ({"team": "nobody"}, "in this workspace&#39;s directory"),
            ({"team": "x" * 101}, "team"),
        ):
            r = await b.post(f"/w/{tenant.slug}/budgets", data={**good, **bad})
            assert r.status_code in (404, 422), (bad, r.status_code)
            assert 'id="budget-error"' in r.text, bad
            assert words in r.text, (bad, words)
        assert await scalar(app, "SELECT count(*) FROM budgets") == 0
        r = await b.post(f"/w/{tenant.slug}/budgets", data={**good, "gpu_hours": "12.5"})
        assert r.status_code == 303, r.text[:300]
        assert r.headers["location"].startswith(f"/w/{tenant.slug}/budgets?period=2026-12")
        # The CSV with the page's sign-in.
        r = await b.get(f"/w/{tenant.slug}/budgets.csv", params={"period": "2026-12"})
        assert r.status_code == 200, r.text[:300]
        assert "vision,2026-12,12.500000," in r.text
        r = await b.get(f"/w/{tenant.slug}/budgets", params={"period": "2026-13"})
        assert r.status_code == 422
        assert "neither a month" in r.text
        # A contact that is no address is refused on the directory page, with a sentence.
        page = await b.get(f"/w/{tenant.slug}/admin/directory")
        r = await b.post(
            f"/w/{tenant.slug}/admin/directory/teams",
            data={"csrf_token": csrf_of(page.text), "team": "vision", "contact": "a<b>@x.example"},
        )
        assert r.status_code == 422
        assert "is not an email address" in r.text
    finally:
        await b.aclose()


async def test_readers_see_and_cannot_set_and_no_other_workspace(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await signed_in(app, client, "bread")
    other = await make_tenant(app, "bother")
    await set_team(client, tenant, "alice", "vision")
    await put_budget(
        client, tenant, "vision", period="month", gpuHours=10, **{"from": "2026-01-01"}
    )
    async with browser(app) as b:
        r = await sign_in(b, f"finance@{tenant.slug}.example")
        assert r.status_code == 303
        page = await b.get(f"/w/{tenant.slug}/budgets")
        assert page.status_code == 200
        assert 'data-team="vision"' in page.text
        assert 'id="budget-form"' not in page.text
        r = await b.post(
            f"/w/{tenant.slug}/budgets",
            data={
                "csrf_token": csrf_of(page.text),
                "team": "vision",
                "kind": "month",
                "gpu_hours": "1",
                "from": "2026-12-01",
            },
        )
        assert r.status_code == 403
        # Another workspace's page is no page of theirs.
        assert (await b.get(f"/w/{other.slug}/budgets")).status_code == 404
        assert (await b.get(f"/w/{other.slug}/budgets.csv")).status_code == 404
        # The usage page per team shows the budgeted team's share of this month.
        usage = await b.get(f"/w/{tenant.slug}/usage", params={"groupBy": "team"})
        assert usage.status_code == 200
    assert await scalar(app, "SELECT count(*) FROM budgets") == 1


async def test_the_page_shows_a_budget_with_its_own_decimals(
    app: Any, client: httpx.AsyncClient
) -> None:
    """A JPY budget of 1.5 was drawn "2" (the currency's digits) where the JSON and the
    CSV say 1.5; in both of the page's tables it is 1.5 now, a whole one stays whole."""
    tenant = await signed_in(app, client, "bdigits")
    await set_team(client, tenant, "alice", "vision")
    await set_team(client, tenant, "bob", "nlp")
    r = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/prices",
        json={"currency": "JPY", "prices": []},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    for team, amount in (("vision", "1.5"), ("nlp", "6000")):
        body = {"period": "month", "amount": amount, "from": "2026-12-01"}
        r = await client.put(
            f"/api/v1/workspaces/{tenant.slug}/budgets/{team}", json=body, headers=tenant.auth()
        )
        assert r.status_code == 200, r.text
    b, _ = await admin_browser(app, tenant)
    try:
        page = await b.get(f"/w/{tenant.slug}/budgets", params={"period": "2026-12"})
        assert page.status_code == 200, page.text[:300]
        assert page.text.count('class="num">1.5</td>') == 2, page.text
        assert page.text.count('class="num">6000</td>') == 2
        assert 'class="num">2</td>' not in page.text
    finally:
        await b.aclose()
