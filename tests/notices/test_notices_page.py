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


async def test_the_add_form_speaks_plainly_and_shows_only_the_kinds_field(demo, page) -> None:  # noqa: F811
    await browser_sign_in(page, demo, "admin@demo.example")
    await page.goto(f"{demo.url}/w/demo/admin/notices")
    form = page.locator("#add-channel")
    # Events by name; the codes stay the checkboxes' values (and the API's words).
    idle_held = form.locator('label.check:has(input[value="gpu.idle_held"])')
    await expect(idle_held).to_have_text("GPU idle-held")
    assert "gpu.idle_held" not in await form.inner_text()
    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 900})
        box = await idle_held.locator("input").bounding_box()
        text = await idle_held.locator("span").bounding_box()
        assert box
        assert text
        # Beside its label: on the same line, to its left.
        assert box["x"] + box["width"] <= text["x"], width
        assert abs((box["y"] + box["height"] / 2) - (text["y"] + text["height"] / 2)) < 6, width
    await page.set_viewport_size({"width": 1280, "height": 900})

    # Only the field the chosen kind uses.
    url, emails = page.locator("#n-url"), page.locator("#n-emails")
    await expect(url).to_be_visible()
    await expect(emails).to_be_hidden()
    await page.select_option("#n-kind", "email")
    await expect(url).to_be_hidden()
    await expect(emails).to_be_visible()
    await page.select_option("#n-kind", "slack")
    await expect(url).to_be_visible()
    await expect(emails).to_be_hidden()

    await page.select_option("#n-kind", "email")
    await page.fill("#n-emails", "ops@demo.example")
    await page.click("#add-channel button[type=submit]")
    added = page.locator("#created-channel")
    await expect(added).to_have_text("Channel added: Email to ops@demo.example.")
    # A confirmation in the board's one success style (the green of "Booked.").
    assert "notice" in ((await added.get_attribute("class")) or "").split()
    row = page.locator("#channels tbody tr").last
    assert "GPU idle-held" in await row.inner_text()
    assert "gpu.idle_held" not in await row.inner_text()
    await screenshots(page, "notices-add")
