"""The notices admin page in Debian's Chromium: add a webhook (its secret shown once),
send a test, see the delivery, keyboard only; at 1280 and 390 px."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from tests.notices.receivers import HttpReceiver
from tests.web.conftest import browser, demo, page  # noqa: F401 (the web tests' fixtures)
from tests.web.helpers import browser_sign_in, screenshots


async def test_add_a_webhook_and_send_a_test(demo, page, hook: HttpReceiver) -> None:  # noqa: F811
    await browser_sign_in(page, demo, "admin@demo.example")
    await page.goto(f"{demo.url}/w/demo/admin")
    await page.click("#notices-link")
    await expect(page.locator("h1")).to_have_text("Notices")

    await page.select_option("#n-kind", "webhook")
    await page.fill("#n-url", hook.url)
    await page.focus("#add-channel button[type=submit]")
    await page.keyboard.press("Enter")
    secret = page.locator("[data-secret]")
    await expect(secret).to_contain_text("whsec_")
    hook.secret = (await secret.text_content() or "").strip()
    await screenshots(page, "notices")

    await page.goto(f"{demo.url}/w/demo/admin/notices")
    assert await page.locator("[data-secret]").count() == 0  # shown once
    assert hook.secret not in await page.content()
    await page.locator('#channels button:has-text("Send a test")').first.focus()
    await page.keyboard.press("Enter")
    await expect(page.locator("p.notice")).to_contain_text("test notice was queued")
    # Only the test counts: the demo's own hosts (one in error, idle-held GPUs) may send
    # their notices to this channel too, whenever the detector's clock comes round.
    rows = page.locator('#deliveries tbody tr[data-type="test"]')
    await expect(rows).to_have_count(1)

    # The served demo board runs the delivery workers: wait for the receiver.
    def tests_received() -> list[Any]:
        return [r for r in hook.delivered() if r.json().get("type") == "test"]

    for _ in range(600):
        if tests_received():
            break
        await page.wait_for_timeout(100)
    assert tests_received()
    assert tests_received()[0].verified
    # The board records the answer just after the receiver gave it: reload until shown.
    delivered = page.locator('#deliveries tr[data-type="test"][data-status="delivered"]')
    for _ in range(60):
        await page.reload()
        if await delivered.count() == 1:
            break
        await page.wait_for_timeout(1000)
    await expect(delivered).to_have_count(1)
