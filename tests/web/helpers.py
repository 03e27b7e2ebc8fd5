"""Helpers for the web tests: signing in over plain HTTP, reading CSRF tokens from forms."""

from __future__ import annotations

import os
import re
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from tests.board.builders import Tenant, make_tenant, push
from tests.board.test_reports_builders import observation

PASSWORD = "correct-horse-battery"
# The committed screenshots are rewritten only when asked (`make screenshots`); other runs
# still take them, checking every width, into a scratch folder, so a test run leaves the
# working tree as it was.
if os.environ.get("GUA_BOARD_SCREENSHOTS") == "1":
    SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
else:
    SCREENSHOTS = Path(tempfile.gettempdir()) / "gua-board-screenshots"
WIDTHS = (1280, 390)
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match, "no CSRF token in the page"
    return match.group(1)


async def sign_in(
    client: httpx.AsyncClient, email: str, password: str = PASSWORD, next: str = "/"
) -> httpx.Response:
    form = await client.get("/signin")
    assert form.status_code == 200, form.text
    return await client.post(
        "/signin",
        data={
            "csrf_token": csrf_of(form.text),
            "email": email,
            "password": password,
            "next": next,
        },
    )


async def browser_sign_in(page: Any, demo: Any, email: str, password: str | None = None) -> None:
    await page.goto(f"{demo.url}/signin")
    await page.fill("#email", email)
    await page.fill("#password", password or demo.password)
    await page.click("form button[type=submit]")
    await page.wait_for_url(re.compile(r".*/w/demo/$"))


async def screenshots(page: Any, name: str) -> None:
    """<name>-<width>.png at every width, the whole page, in SCREENSHOTS."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        await page.set_viewport_size({"width": width, "height": 900})
        await page.wait_for_timeout(300)
        scroll = await page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, f"{name} scrolls sideways at {width}px ({scroll}px wide)"
        await page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"), full_page=True)
    await page.set_viewport_size({"width": WIDTHS[0], "height": 900})


def browser(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://board.test")


async def admin_browser(app: Any, tenant: Tenant) -> tuple[httpx.AsyncClient, str]:
    """A browser signed in as the tenant's admin, and a CSRF token of its admin page."""
    b = browser(app)
    r = await sign_in(b, f"admin@{tenant.slug}.example", PASSWORD)
    assert r.status_code in (200, 303), r.text[:300]
    page = await b.get(f"/w/{tenant.slug}/admin")
    assert page.status_code == 200, page.text[:300]
    return b, csrf_of(page.text)


async def signed_in(app: Any, client: httpx.AsyncClient, slug: str) -> Tenant:
    tenant = await make_tenant(app, slug)
    r = await sign_in(client, f"admin@{slug}.example")
    assert r.status_code == 303, r.text
    # A day: no host here turns stale while a slow machine runs the test.
    r = await client.patch(
        f"/api/v1/workspaces/{slug}/settings",
        json={"staleAfterSeconds": 86400},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    return tenant


async def observe(
    client: httpx.AsyncClient, agent_token: str, at: datetime, gpus: list[dict[str, Any]]
) -> None:
    r = await push(client, agent_token, observation(at, gpus))
    assert r.status_code == 202, r.text


def encoded(value: str) -> str:
    from urllib.parse import quote

    return value if value.startswith("%") else quote(value, safe="")
