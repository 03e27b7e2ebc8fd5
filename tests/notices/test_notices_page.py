"""The notices admin page in Debian's Chromium: add a webhook (its secret shown once),
send a test, see the delivery, keyboard only; at 1280 and 390 px."""

from __future__ import annotations

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
    rows = page.locator("#deliveries tbody tr")
    await expect(rows).to_have_count(1)

    # The served demo board runs the delivery workers: wait for the receiver.
    for _ in range(600):
        if hook.delivered():
            break
        await page.wait_for_timeout(100)
    assert hook.delivered()[0].verified
    await page.reload()
    await expect(page.locator('#deliveries tr[data-status="delivered"]')).to_have_count(1)
