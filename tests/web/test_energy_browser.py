"""Energy on the pages in Chromium at 1280 and 390 px: the fleet's energy tiles, the
electricity and carbon forms by keyboard alone, kWh per day on the usage page, each
person's kWh; text at 4.5:1 or more."""

from __future__ import annotations

import re
from typing import Any

from playwright.async_api import expect

from tests.web.helpers import browser_sign_in, screenshots
from tests.web.test_contrast import contrast

# The text's colour and the first opaque background behind it, as #rrggbb.
_COLOURS = """e => {
  if (!e.isConnected) return null;  // the fleet's refresh replaced it: ask again
  const hex = c => '#' + c.match(/[\\d.]+/g).slice(0, 3)
      .map(n => (+n).toString(16).padStart(2, '0')).join('');
  let b = e;
  while (b && /rgba\\(.*, 0\\)|transparent/.test(getComputedStyle(b).backgroundColor)) {
    b = b.parentElement;
  }
  const bg = b ? getComputedStyle(b).backgroundColor : 'rgb(255, 255, 255)';
  return [hex(getComputedStyle(e).color), hex(bg)];
}"""


async def _contrast(page: Any, selector: str) -> float:
    for _ in range(20):
        colours = await page.locator(selector).first.evaluate(_COLOURS)
        if colours is not None:
            return contrast(*colours)
    raise AssertionError(f"{selector} was replaced on every try")


async def test_energy_tiles_forms_chart_and_people(demo, page) -> None:
    await demo.backfilled.wait()
    await browser_sign_in(page, demo, "admin@demo.example")
    watts = page.locator("[data-energy-watts]")
    await expect(watts).to_have_text(re.compile(r"^[\d,]+ W$"))
    await expect(page.locator("[data-energy-today]")).to_have_text(re.compile(r" kWh$"))
    for selector in ("[data-energy-watts]", ".energy-now .tile > span:last-child"):
        assert await _contrast(page, selector) >= 4.5, selector
    await screenshots(page, "energy-fleet")

    # The currency first (electricity prices are in it), by keyboard, on the prices page.
    await page.goto(f"{demo.url}/w/{demo.slug}/admin/prices")
    if await page.locator("#currency-form").count():
        await page.focus("#p-currency")
        await page.keyboard.type("EUR")
        await page.keyboard.press("Tab")
        await page.keyboard.press("Enter")
        await page.wait_for_selector("#prices-notice")
    await page.focus("#energy-prices-link")
    await page.keyboard.press("Enter")
    await page.wait_for_url(re.compile(r".*/energy-prices$"))

    today = await page.input_value("#e-price-from")
    await page.focus("#e-price")
    await page.keyboard.type("0.28")
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.id") == "e-price-from"
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.textContent") == "Save price"
    await page.keyboard.press("Enter")
    await expect(page.locator("#energy-notice")).to_contain_text("Electricity price saved")
    await expect(page.locator(f'#energy-prices-table tr[data-from="{today}"]')).to_contain_text(
        "0.28"
    )

    # The intensity: Tab from the price form's button reaches it.
    await page.focus("#e-grams")
    await page.keyboard.type("350")
    await page.keyboard.press("Tab")
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.textContent") == "Save intensity"
    await page.keyboard.press("Enter")
    await expect(page.locator("#energy-notice")).to_contain_text("Carbon intensity saved")
    await expect(page.locator(f'#carbon-table tr[data-from="{today}"]')).to_contain_text("350")

    for selector in ("#energy-notice", "label[for=e-price]", "#carbon-table td", "h1"):
        assert await _contrast(page, selector) >= 4.5, selector
    await screenshots(page, "energy-prices")

    await page.goto(f"{demo.url}/w/{demo.slug}/usage")
    await page.wait_for_selector(".energy-chart g[data-energy-day]", state="attached")
    await page.focus("#energy-table-note")
    await page.keyboard.press("Enter")
    await expect(page.locator("#energy-days")).to_be_visible()
    assert await _contrast(page, "#energy-days td") >= 4.5
    await screenshots(page, "energy-usage")

    await page.goto(f"{demo.url}/w/{demo.slug}/people")
    await expect(page.locator("td[data-idle-energy]").first).to_contain_text("kWh")
    await screenshots(page, "energy-people")
