"""The prices page in Chromium, by keyboard alone, at 1280 and 390 px: reached from the
admin page, the currency chosen, a price for a model of the fleet set, corrected and
removed."""

from __future__ import annotations

import re
from typing import Any

from tests.web.helpers import browser_sign_in, screenshots


async def _notice(page: Any) -> str:
    await page.wait_for_selector("#prices-notice")
    text: str = await page.inner_text("#prices-notice")
    return text


async def test_prices_page_by_keyboard(demo, page) -> None:
    await browser_sign_in(page, demo, "admin@demo.example")
    await page.goto(f"{demo.url}/w/{demo.slug}/admin")
    await page.focus("#prices-link")
    await page.keyboard.press("Enter")
    await page.wait_for_url(re.compile(r".*/admin/prices$"))
    assert "days after it takes effect" in await page.inner_text("#window-rule")

    if await page.locator("#currency-form").count():
        await page.focus("#p-currency")
        await page.keyboard.type("EUR")
        await page.keyboard.press("Tab")
        await page.keyboard.press("Enter")
        assert "Currency saved" in await _notice(page)
    assert re.fullmatch(r"Per GPU-hour \([A-Z]{3}\)", await page.inner_text("label[for=p-amount]"))

    # The fleet's models are offered; the first after "*" is priced.
    options = await page.eval_on_selector_all("#gpu-models option", "els => els.map(e => e.value)")
    assert options[0] == "*"
    model = options[1]
    today = await page.input_value("#p-from")
    await page.focus("#p-model")
    await page.keyboard.type(model)
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.id") == "p-amount"
    await page.keyboard.type("0.80")
    await page.keyboard.press("Enter")
    assert "Price saved" in await _notice(page)
    row = page.locator("#prices-table tbody tr", has_text=model).filter(has_text=today)
    assert "0.80" in await row.inner_text()
    assert await row.get_attribute("data-state") == "open"

    # The typo corrected in its own row: focus the amount, replace it, Enter.
    await row.locator("input[name=per_gpu_hour]").focus()
    await page.keyboard.press("Control+A")
    await page.keyboard.type("0.85")
    await page.keyboard.press("Enter")
    assert "Price saved" in await _notice(page)
    row = page.locator("#prices-table tbody tr", has_text=model).filter(has_text=today)
    assert "0.85" in await row.inner_text()
    in_force = await page.inner_text("#in-force-table")
    assert model in in_force
    assert "0.85" in in_force

    # Tab from the amount reaches the row's Correct and Remove buttons.
    await row.locator("input[name=per_gpu_hour]").focus()
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.textContent") == "Correct"
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.textContent") == "Remove"
    await screenshots(page, "prices")

    await page.keyboard.press("Enter")
    assert "Price removed" in await _notice(page)
    gone = page.locator("#prices-table tbody tr", has_text=model).filter(has_text=today)
    assert await gone.count() == 0
