"""Fleet health and "Find GPUs" in Debian's Chromium, on the demo's board plus one host of
the test's own (a GPU gone, a GPU hot) and a maintenance window: the badges, the form by
keyboard, "Book these" into the booking form, retiring, at 1280 and 390 px, and the
contrast of what these badges draw."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from playwright.async_api import expect

from tests.board.test_reports_builders import gpu, observation
from tests.web.helpers import browser_sign_in, screenshots
from tests.web.test_browser import api_token, host_of
from tests.web.test_contrast import contrast

ADMIN = "admin@demo.example"


def card(index: int, temperature: int = 45) -> dict[str, Any]:
    body = gpu(index, used=2000, total=81920)
    body["temperatureC"] = temperature
    return body


async def sick_host(demo: Any) -> str:
    """node-sick: GPU-1 gone 3 minutes ago, GPU-2 at 93 °C; its host id."""
    token = await api_token(demo, ADMIN)
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=demo.url, timeout=30) as api:
        # No host of this test turns stale while a slow machine runs it.
        r = await api.patch(
            f"/api/v1/workspaces/{demo.slug}/settings",
            json={"staleAfterSeconds": 3600},
            headers=auth,
        )
        assert r.status_code == 200, r.text
        issued = await api.post(
            f"/api/v1/workspaces/{demo.slug}/enrollment-tokens",
            json={"displayName": "node-sick"},
            headers=auth,
        )
        assert issued.status_code == 201, issued.text
        claimed = await api.post(
            "/agent/v1/enrollments/claim",
            json={
                "enrollmentToken": issued.json()["enrollmentToken"],
                "hostname": "node-sick",
                "agentVersion": "1.8.0",
            },
        )
        assert claimed.status_code == 201, claimed.text
        agent = {"Authorization": f"Bearer {claimed.json()['agentToken']}"}
        now = datetime.now(UTC)
        pushes = [(now - timedelta(minutes=4), [card(0), card(1), card(2), card(3)])]
        pushes += [
            (now - timedelta(minutes=m, seconds=2), [card(0), card(2, 93), card(3)])
            for m in (3, 2, 1, 0)
        ]
        for at, cards in pushes:
            r = await api.post("/agent/v1/observations", json=observation(at, cards), headers=agent)
            assert r.status_code == 202, r.text
        window = await api.post(
            f"/api/v1/workspaces/{demo.slug}/hosts/{host_of(demo, 'ok').host_id}/maintenance",
            json={
                "start": (now - timedelta(hours=1)).isoformat(),
                "end": (now + timedelta(hours=3)).isoformat(),
                "note": "new fans",
            },
            headers=auth,
        )
        assert window.status_code == 201, window.text
        return str(claimed.json()["hostId"])


async def _contrast_of(page: Any, selector: str) -> float:
    colours = await page.locator(selector).first.evaluate(
        """e => { const s = getComputedStyle(e);
                  const hex = c => '#' + c.match(/\\d+/g).slice(0, 3)
                      .map(n => (+n).toString(16).padStart(2, '0')).join('');
                  return [hex(s.color), hex(s.backgroundColor)]; }"""
    )
    return contrast(*colours)


async def test_fleet_health_badges_find_gpus_and_retire(demo, page) -> None:
    sick = await sick_host(demo)
    await browser_sign_in(page, demo, ADMIN)
    counts = page.locator(".health-counts")
    await expect(counts.locator('[data-health="missing"]')).to_have_text("1 missing")
    await expect(counts.locator('[data-health="hot"]')).to_have_text("1 hot")
    missing = page.locator(f'[data-missing="{sick}/GPU-1"]')
    await expect(missing).to_contain_text("node-sick GPU 1")
    await expect(page.locator(f'[data-hot="{sick}/2"]')).to_contain_text("93 °C")
    host = page.locator(f'section.host[data-host="{sick}"]')
    await expect(host.locator("[data-host-missing]")).to_have_text("1 GPU missing")
    await expect(host.locator('article.gpu[aria-label^="GPU 2"] [data-hot-card]')).to_be_visible()
    ok_host = page.locator(f'section.host[data-host="{host_of(demo, "ok").host_id}"]')
    await expect(ok_host.locator("[data-host-maintenance]")).to_have_text("In maintenance")
    for selector in (".badge.health-hot", ".badge.health-missing", ".badge.health-maintenance"):
        assert await _contrast_of(page, selector) >= 4.5, selector
    await screenshots(page, "fleet-health")

    # "Find GPUs" by keyboard: open the form, fill it, submit with Enter.
    await page.focus("details.find > summary")
    await page.keyboard.press("Enter")
    await expect(page.locator("#c-gpus")).to_be_visible()
    await page.keyboard.press("Tab")
    await expect(page.locator("#c-gpus")).to_be_focused()
    await page.keyboard.press("Control+A")
    await page.keyboard.type("3")
    await page.keyboard.press("Tab")
    await page.keyboard.type("60")
    await page.keyboard.press("Tab")
    await page.keyboard.type("A100")
    await page.keyboard.press("Enter")
    await page.wait_for_url("**/find-gpus?**")
    await expect(page.locator("h1")).to_have_text("Find GPUs")
    first = page.locator("ol.candidates > li").first
    await expect(first).to_have_attribute("data-candidate", sick)
    await expect(first.locator("[data-gpu]")).to_have_count(3)
    assert await page.input_value("#c-model") == "A100"  # the form keeps what was asked
    await screenshots(page, "find-gpus")
    book = first.locator("a:has-text('Book these')")
    await book.focus()
    await page.keyboard.press("Enter")
    await page.wait_for_url("**/reservations?**")
    assert await page.locator("#b-host").input_value() == sick
    checked = page.locator('#b-gpus input[name="gpus"]:checked')
    assert sorted([await c.input_value() for c in await checked.all()]) == [
        "GPU-0",
        "GPU-2",
        "GPU-3",
    ]
    assert await page.input_value("#b-start")
    assert await page.input_value("#b-end")

    # Retire the missing GPU (keyboard): it leaves the list, the counts follow.
    await page.goto(f"{demo.url}/w/{demo.slug}/")
    retire = page.locator(f'[data-missing="{sick}/GPU-1"] button:has-text("Retire")')
    await retire.focus()
    await page.keyboard.press("Enter")
    await page.wait_for_url(f"**/w/{demo.slug}/")
    await expect(page.locator(".health-counts [data-health='missing']")).to_have_text("0 missing")
    await expect(page.locator(f'[data-missing="{sick}/GPU-1"]')).to_have_count(0)
