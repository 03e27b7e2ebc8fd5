"""The budgets page in Debian's Chromium: a bar per team that says in words what it shows
(used, forecast, the budget line, the status), an admin sets a budget by keyboard, the
others read; at 1280 and 390 px; text contrast at least 4.5:1. The usage page per team
shows each team's share, and the directory page takes a team's contact."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.web.helpers import browser_sign_in, screenshots
from tests.web.test_browser import api_token
from tests.web.test_contrast import contrast

_RGB = re.compile(r"rgba?\((\d+), (\d+), (\d+)")


def _hex(css: str) -> str:
    match = _RGB.match(css)
    assert match, css
    return "#" + "".join(f"{int(c):02x}" for c in match.groups())


async def _setup(demo: Any) -> None:
    token = await api_token(demo, "admin@demo.example")
    auth = {"Authorization": f"Bearer {token}"}
    api = f"/api/v1/workspaces/{demo.slug}"
    since = (datetime.now(UTC).date() - timedelta(days=40)).isoformat()
    r = await demo.client.put(
        f"{api}/prices",
        json={"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 2, "from": since}]},
        headers=auth,
    )
    assert r.status_code == 200, r.text
    for user, team in (("alice", "vision"), ("bob", "vision"), ("carol", "nlp")):
        r = await demo.client.put(
            f"{api}/directory/{user}", json={"memberEmail": None, "team": team}, headers=auth
        )
        assert r.status_code == 200, r.text
    # A budget vision has long used up (a tenth of a GPU-hour a month).
    budget = {"period": "month", "gpuHours": 0.1, "from": "2026-01-01"}
    r = await demo.client.put(f"{api}/budgets/vision", json=budget, headers=auth)
    assert r.status_code == 200, r.text


async def _text_contrast(page: Any, selector: str) -> float:
    colours = await page.eval_on_selector(
        selector,
        """e => {
            let bg = 'rgba(0, 0, 0, 0)', at = e;
            while (at && (bg === 'rgba(0, 0, 0, 0)' || bg === 'transparent')) {
                bg = getComputedStyle(at).backgroundColor; at = at.parentElement;
            }
            return [getComputedStyle(e).color, bg];
        }""",
    )
    bg = colours[1] if not colours[1].startswith("rgba(0, 0, 0, 0)") else "rgb(255, 255, 255)"
    return contrast(_hex(colours[0]), _hex(bg))


# Two hours of history: the last 7 days' pace is more than nothing, so the forecast
# reaches past what was used (the striped part of a bar).
@pytest.mark.parametrize("demo", [{"history": timedelta(hours=2)}], indirect=True)
async def test_budgets_page_bars_keyboard_widths_and_contrast(demo, page) -> None:
    await asyncio.wait_for(demo.backfilled.wait(), timeout=60)
    await _setup(demo)
    await browser_sign_in(page, demo, "admin@demo.example")
    await page.click("nav >> text=Budgets")
    await page.wait_for_selector("#budget-bars")
    vision = page.locator('#budget-bars li[data-team="vision"]')
    # The status in words beside the bar, and the bar's own label says it all.
    await vision.locator(".badge").wait_for()
    assert await vision.locator(".badge").inner_text() == "Exceeded"
    label = await vision.locator("svg").get_attribute("aria-label") or ""
    assert re.search(r"vision: [\d,.]+ of 0\.1 GPU-hours used \(\d+ %\), forecast", label), label
    assert await vision.locator("line.budget-line").count() == 1
    nlp = page.locator('#budget-bars li[data-team="nlp"]')
    assert await nlp.locator(".badge").inner_text() == "No budget"
    assert await nlp.locator("line.budget-line").count() == 0
    # The forecast reaches past the used part: a pace of more than nothing a day.
    used = float(await nlp.locator("rect.budget-used").get_attribute("width") or 0)
    forecast = float(await nlp.locator("rect.budget-forecast").get_attribute("width") or 0)
    assert forecast > used, (used, forecast)
    assert "vision" in await page.inner_text("#budget-table")
    assert "forecast at the period's end" in await page.inner_text("#teams")

    # Badges, muted text and the figures read at 4.5:1 or more.
    for selector in (
        '#budget-bars li[data-team="vision"] .badge',
        '#budget-bars li[data-team="nlp"] .badge',
        "#forecast-rule",
        '#budget-bars li[data-team="vision"] .budget-words',
        "#budget-table tbody td",
    ):
        assert await _text_contrast(page, selector) >= 4.5, selector

    # An admin sets nlp's budget with the keyboard alone.
    await page.focus("#s-team")
    await page.keyboard.press("End")  # the last team: "vision" (C order: nlp, vision)
    await page.keyboard.press("Home")
    assert await page.eval_on_selector("#s-team", "e => e.value") == "nlp"
    await page.keyboard.press("Tab")  # Per: Month
    await page.keyboard.press("Tab")
    await page.keyboard.type("5000")
    await page.keyboard.press("Tab")
    await page.keyboard.type("9000.50")
    await page.keyboard.press("Tab")
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#budget-notice")
    assert "nlp" in await page.inner_text("#budget-notice")
    assert await nlp.locator(".badge").inner_text() == "On track"
    assert "9000.5" in (await page.inner_text("#history-table")).replace(",", "")
    await page.goto(f"{demo.url}/w/{demo.slug}/budgets")
    await screenshots(page, "budgets")

    # The usage page per team: each budgeted team's share of this month's budget.
    await page.goto(f"{demo.url}/w/{demo.slug}/usage?groupBy=team")
    shares = page.locator("#budget-shares")
    await shares.wait_for()
    assert "over budget" in await shares.locator('li[data-team="vision"]').inner_text()

    # The directory page takes a team's contact.
    await page.goto(f"{demo.url}/w/{demo.slug}/admin/directory#teams")
    field = page.locator('#dir-teams tr[data-team="vision"] input[name="contact"]')
    await field.focus()
    await page.keyboard.type("leads@vision.example")
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#dir-notice")
    assert await field.input_value() == "leads@vision.example"
    await screenshots(page, "directory-teams")


async def test_finance_reads_budgets_without_the_form(demo, page) -> None:
    await asyncio.wait_for(demo.backfilled.wait(), timeout=60)
    await _setup(demo)
    await browser_sign_in(page, demo, "finance@demo.example")
    await page.goto(f"{demo.url}/w/{demo.slug}/budgets")
    await page.wait_for_selector("#budget-bars")
    assert await page.locator("#budget-form").count() == 0
    assert await page.locator('#budget-bars li[data-team="vision"]').count() == 1
    # The CSV, with the page's sign-in: the API's file.
    href = await page.get_attribute("#budgets-csv", "href") or ""
    answer = await page.request.get(f"{demo.url}{href}")
    assert answer.status == 200
    assert (await answer.text()).startswith("team,period,budgetGpuHours,usedGpuHours,")
    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 900})
        scroll = await page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, (width, scroll)
