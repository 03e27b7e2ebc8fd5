"""Layout in Debian's Chromium at 1280 and 390 px, against the demo: lists read in one
column, a cut table says it is cut, tokens never break, a chip only where it tells
something."""

from __future__ import annotations

import asyncio

from playwright.async_api import expect

from tests.web.helpers import browser_sign_in, screenshots
from tests.web.test_browser import host_of

# How many lines a piece of text takes on screen: its height over the line height (a
# range's rectangles also count empty fragments at line ends, so they are not counted).
_LINES = """el => {
  const range = document.createRange();
  range.selectNodeContents(el);
  const line = parseFloat(getComputedStyle(el).lineHeight);
  return Math.round(range.getBoundingClientRect().height / line);
}"""


async def test_fleet_offenders_in_one_column_and_chips_only_when_booked(demo, page) -> None:
    await browser_sign_in(page, demo, "lead@demo.example")
    items = page.locator(".offenders li")
    await expect(items).to_have_count(3)  # the demo's idle-held GPUs
    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 900})
        boxes = [await item.bounding_box() for item in await items.all()]
        lefts = {round(box["x"]) for box in boxes if box}
        assert len(lefts) == 1, (width, boxes)  # one column, read top to bottom
        tops = [box["y"] for box in boxes if box]
        assert tops == sorted(tops), (width, tops)
    await page.set_viewport_size({"width": 1280, "height": 900})
    # "Free"/"In use" beside "Idle"/"Active" said nothing: a chip only for a booking.
    cards = page.locator("article.gpu")
    assert await cards.count() > 0
    for card in await cards.all():
        availability = await card.get_attribute("data-availability")
        chips = await card.locator(".avail").count()
        assert chips == (1 if availability and availability.startswith("reserved_") else 0)
    await screenshots(page, "layout-fleet")


async def test_a_cut_table_says_so_and_tokens_stay_whole(demo, page) -> None:
    await asyncio.wait_for(demo.backfilled.wait(), timeout=60)
    await browser_sign_in(page, demo, "admin@demo.example")
    await page.click("nav >> text=Usage")
    box = page.locator(".table-scroll:has(#usage-table)")
    await page.set_viewport_size({"width": 1280, "height": 900})
    await expect(box).not_to_have_attribute("data-more", "right")
    await page.set_viewport_size({"width": 390, "height": 900})
    # At 390 px the last columns are cut: the box says so, and its cut edge fades.
    assert await box.evaluate("el => el.scrollWidth > el.clientWidth")
    await expect(box).to_have_attribute("data-more", "right")
    assert await box.evaluate("el => getComputedStyle(el).maskImage") != "none"
    await box.evaluate("el => { el.scrollLeft = el.scrollWidth; }")
    await expect(box).to_have_attribute("data-more", "left")
    await box.evaluate("el => { el.scrollLeft = 0; }")
    await screenshots(page, "layout-usage")

    # A host's agent token on one line, on its host page and where it is issued.
    host = host_of(demo, "ok")
    await page.goto(f"{demo.url}/w/demo/hosts/{host.host_id}")
    token = page.locator(".facts code").first
    await expect(token).to_contain_text("gua_agent_")
    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 900})
        assert await token.evaluate(_LINES) == 1, width
    await screenshots(page, "layout-host")
    await page.goto(f"{demo.url}/w/demo/admin")
    await page.fill("#e-name", "lab-wide")
    await page.click("text=Issue enrollment token")
    issued = (await page.inner_text("[data-token]")).strip()
    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 900})
        assert await page.locator("[data-token]").evaluate(_LINES) == 1, width
        # The command as it is pasted: one line (a token may hold '-', a break opportunity).
        command = page.locator("#enroll-command")
        assert issued in await command.inner_text()
        assert await command.evaluate(_LINES) == 1, width
    await screenshots(page, "layout-admin")
