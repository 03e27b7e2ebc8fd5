"""Team statements in Chromium: reached from the usage page, by keyboard, at 1280 and
390 px, and printable (the print style hides the board's navigation and the buttons)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.web.helpers import WIDTHS, browser_sign_in, screenshots
from tests.web.test_browser import api_token


async def _setup_money(demo: Any) -> None:
    token = await api_token(demo, "admin@demo.example")
    auth = {"Authorization": f"Bearer {token}"}
    since = (datetime.now(UTC).date() - timedelta(days=40)).isoformat()
    r = await demo.client.put(
        f"/api/v1/workspaces/{demo.slug}/prices",
        json={"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1.25, "from": since}]},
        headers=auth,
    )
    assert r.status_code == 200, r.text
    for user, team in (("alice", "vision"), ("bob", "vision"), ("carol", "=cmd|' /C calc'!A0")):
        r = await demo.client.put(
            f"/api/v1/workspaces/{demo.slug}/directory/{user}",
            json={"memberEmail": None, "team": team},
            headers=auth,
        )
        assert r.status_code == 200, r.text


async def test_statement_page_keyboard_widths_and_print(demo, page) -> None:
    await asyncio.wait_for(demo.backfilled.wait(), timeout=60)
    await _setup_money(demo)
    await browser_sign_in(page, demo, "finance@demo.example")
    await page.goto(f"{demo.url}/w/{demo.slug}/usage?groupBy=team")
    await page.wait_for_selector("#usage-table")
    table = await page.inner_text("#usage-table")
    assert "vision" in table
    assert "Cost (EUR)" in table
    await page.click("text=Team statements")
    await page.wait_for_selector("#teams-table")
    teams = await page.inner_text("#teams-table")
    assert "vision" in teams
    assert "=cmd" in teams  # shown as text on the page, escaped
    # By keyboard: focus the team's link and follow it with Enter.
    link = page.locator("#teams-table a", has_text="vision")
    await link.focus()
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#statement-table")
    statement = await page.inner_text("#statement-table")
    assert "alice" in statement
    assert "bob" in statement
    assert "EUR" in await page.inner_text(".statement")
    # The Print and CSV controls are reachable with Tab.
    reached = set()
    for _ in range(40):
        await page.keyboard.press("Tab")
        reached.add(await page.evaluate("document.activeElement && document.activeElement.id"))
        if {"statement-csv", "statement-print"} <= reached:
            break
    assert {"statement-csv", "statement-print"} <= reached
    for width in WIDTHS:
        await page.set_viewport_size({"width": width, "height": 900})
        overflow = await page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 1, (width, overflow)
    await screenshots(page, "statement")
    # Printed: no navigation, no form, no buttons; the figures stay.
    await page.emulate_media(media="print")
    assert not await page.locator("header.top").is_visible()
    assert not await page.locator("#statement-print").is_visible()
    assert await page.locator("#statement-table").is_visible()
    await page.emulate_media(media="screen")
