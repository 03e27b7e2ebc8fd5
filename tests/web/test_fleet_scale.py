"""The fleet page on a 300-host fleet (2,400 GPUs), in Debian's Chromium.

The fleet is built through the real agent API (enrollment, one push per host) against
a served board; one host's GPU is idle-held by `zed` since a known minute.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.board.builders import make_tenant, push
from tests.board.db import execute
from tests.board.test_stream import serve
from tests.web.helpers import PASSWORD, SCREENSHOTS, screenshots
from tests.web.test_contrast import contrast

HOSTS = 300
USERS = [f"user{n:02d}" for n in range(30)]


def _snapshot(i: int, at: datetime, zed: bool = False) -> dict[str, Any]:
    gpus = []
    for g in range(8):
        kind = (i * 8 + g) % 5
        users = [USERS[(i + g) % len(USERS)], USERS[(i * 7 + g + 1) % len(USERS)]]
        if zed and g == 0:
            kind, users = 2, ["zed"]
        held = kind < 3
        gpus.append(
            {
                "index": g,
                "uuid": f"GPU-{i:03d}-{g}",
                "name": "NVIDIA H100 80GB HBM3" if i % 2 else "NVIDIA A100-SXM4-40GB",
                "memoryTotalMb": 81559,
                "utilPct": 90 if kind < 2 else 0,
                "memoryUsedMb": 40000 if held else 0,
                "temperatureC": 50,
                "powerW": 300,
                "processes": [
                    {
                        "pid": 1000 + n,
                        "linuxUser": u,
                        "name": "python",
                        "type": "compute",
                        "memoryUsedMb": 20000,
                    }
                    for n, u in enumerate(users)
                ]
                if held
                else [],
                "usageState": "active" if kind < 2 else ("idle_held" if kind == 2 else "idle"),
            }
        )
    return {
        "schemaVersion": "availability.snapshot.v1",
        "collectionStatus": "ok",
        "observedAt": at.isoformat(),
        "host": {"hostname": f"gpu-{i:03d}", "agentVersion": "1.8.0", "driverVersion": "560"},
        "gpus": gpus,
        "errors": [],
    }


# zed's card has been idle-held since this whole minute, 3 h 10 min before the test.
ZED_HOST = 123


@pytest.fixture
async def fleet(app: Any, client: Any) -> dict[str, Any]:
    tenant = await make_tenant(app, "acme")
    # One push every 3 h 10 min would be a gap: this workspace tolerates a day.
    await execute(
        app,
        "UPDATE workspaces SET max_sample_gap_seconds = 86400, sample_gap_seconds = '{86400}'",
    )
    now = datetime.now(UTC)
    start = now.replace(second=0, microsecond=0) - timedelta(hours=3, minutes=10)
    gate = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with gate:
            issued = await client.post(
                "/api/v1/workspaces/acme/enrollment-tokens",
                json={"displayName": f"gpu-{i:03d}"},
                headers=tenant.auth(),
            )
            claimed = await client.post(
                "/agent/v1/enrollments/claim",
                json={"enrollmentToken": issued.json()["enrollmentToken"]},
            )
            token = claimed.json()["agentToken"]
            if i == ZED_HOST:
                r = await push(client, token, _snapshot(i, start, zed=True))
                assert r.status_code == 202, r.text
            r = await push(client, token, _snapshot(i, now - timedelta(seconds=5), i == ZED_HOST))
            assert r.status_code == 202, r.text

    await asyncio.gather(*(one(i) for i in range(HOSTS)))
    return {"start": start, "tenant": tenant}


async def _sign_in(page: Any, base: str) -> None:
    await page.goto(f"{base}/signin")
    await page.fill("#email", "member@acme.example")
    await page.fill("#password", PASSWORD)
    await page.click("form button[type=submit]")
    await page.wait_for_url(re.compile(r".*/w/acme/$"))


_COLOURS = """
(selector) => Array.from(document.querySelectorAll(selector)).slice(0, 60).map((el) => {
  let bg = el, colour = "rgba(0, 0, 0, 0)";
  while (bg && (colour === "rgba(0, 0, 0, 0)" || colour === "transparent")) {
    colour = getComputedStyle(bg).backgroundColor;
    bg = bg.parentElement;
  }
  return [getComputedStyle(el).color, colour];
})
"""


def _hex(rgb: str) -> str:
    r, g, b = (int(v) for v in re.findall(r"\d+", rgb)[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


async def _assert_contrast(page: Any, selector: str) -> None:
    pairs = await page.evaluate(_COLOURS, selector)
    assert pairs, selector
    for fg, bg in pairs:
        ratio = contrast(_hex(fg), _hex(bg))
        assert ratio >= 4.5, (selector, fg, bg, ratio)


def _expected_duration(start: datetime) -> str:
    minutes = int((datetime.now(UTC) - start).total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60} min"


async def test_fleet_at_scale(app: Any, fleet: dict[str, Any], page: Any) -> None:
    async with serve(app) as base:
        await _sign_in(page, base)
        # Above the fold: the counts, and zed's card as the worst offender, to the minute.
        assert int(await page.inner_text('[data-count="idle_held"]')) > 300
        top = page.locator(".offenders li").first
        text = await top.inner_text()
        assert f"gpu-{ZED_HOST:03d} GPU 0" in text
        assert "zed" in text
        assert _expected_duration(fleet["start"]) in text
        # The dense view: a row per GPU.
        assert await page.locator("table.gpu-rows tr[data-gpu]").count() == HOSTS * 8
        for selector in ("table.gpu-rows td", "table.gpu-rows .badge", ".offenders li"):
            await _assert_contrast(page, selector)
        # Readable at 1280 and 390 px (no sideways scroll); the page above the fold, and a
        # search narrowed to a dozen hosts (a whole-page picture of 2,400 rows is too tall).
        await page.screenshot(path=str(SCREENSHOTS / "fleet-scale-top-1280.png"))
        await page.goto(f"{base}/w/acme/?q=gpu-12")
        await screenshots(page, "fleet-scale-rows")

        # Search for a user: only their GPUs, and the query in the URL.
        await page.fill("#f-q", "user07")
        await page.wait_for_url(re.compile(r".*\?q=user07$"))
        rows = page.locator("table.gpu-rows tr[data-gpu]")
        deadline = time.monotonic() + 30
        # The live refresh swaps the rows in: wait until every row shown is user07's.
        while not all("user07" in t for t in await rows.all_inner_texts()):
            assert time.monotonic() < deadline, "the search did not narrow the rows"
            await page.wait_for_timeout(200)
        n = await rows.count()
        assert 0 < n < HOSTS * 8
        for i in range(n):
            assert "user07" in await rows.nth(i).inner_text()
        # The same URL, opened afresh, shows the same answer (a link to share).
        await page.goto(page.url)
        assert await page.locator("table.gpu-rows tr[data-gpu]").count() == n

        # Sorted by idle-held duration: zed's card first; grouped by user.
        await page.goto(f"{base}/w/acme/?sort=idle_held&state=idle_held")
        first = page.locator("table.gpu-rows tr[data-gpu]").first
        assert await first.get_attribute("data-gpu") is not None
        assert "zed" in await first.inner_text()
        await page.goto(f"{base}/w/acme/?group=user&q=zed")
        groups = page.locator("table.gpu-rows th[data-group]")
        assert await groups.all_inner_texts() == ["zed · 1"]
        await page.goto(f"{base}/w/acme/?group=state")
        keys = await page.locator("table.gpu-rows th[data-group]").evaluate_all(
            "els => els.map(e => e.dataset.group)"
        )
        assert keys == ["active", "idle_held", "idle"]

        # Sorted by utilization: largest first.
        await page.goto(f"{base}/w/acme/?sort=util&view=rows&group=state&state=active")
        assert "90 %" in await page.locator("table.gpu-rows tr[data-gpu]").first.inner_text()

        # The heat-map and the people view.
        await page.goto(f"{base}/w/acme/?view=map")
        assert await page.locator(".heatmap .cell").count() == HOSTS * 8
        await _assert_contrast(page, ".heatmap .cell")
        await _assert_contrast(page, ".map-host")
        await screenshots(page, "fleet-scale-map")
        await page.goto(f"{base}/w/acme/people")
        zed = page.locator('tr[data-user="zed"]')
        assert "1" in await zed.inner_text()
        await screenshots(page, "fleet-scale-people")

        # Keyboard: the search box and the first host link are reachable by Tab.
        await page.goto(f"{base}/w/acme/")
        reached = set()
        for _ in range(40):
            await page.keyboard.press("Tab")
            reached.add(
                await page.evaluate("document.activeElement.id || document.activeElement.tagName")
            )
        assert "f-q" in reached
        assert "f-sort" in reached
        await page.goto("about:blank")  # no refresh left in flight when the board stops


async def test_unchanged_refresh_is_a_304(app: Any, fleet: dict[str, Any], client: Any) -> None:
    from tests.web.helpers import sign_in

    assert (await sign_in(client, "member@acme.example")).status_code in (200, 303)
    first = await client.get("/w/acme/fleet.json")
    assert first.status_code == 200
    etag = first.headers["etag"]
    again = await client.get("/w/acme/fleet.json", headers={"If-None-Match": etag})
    if again.status_code == 200:  # the minute turned between the two calls
        etag = again.headers["etag"]
        again = await client.get("/w/acme/fleet.json", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    gz = await client.get("/w/acme/", headers={"Accept-Encoding": "gzip"})
    assert gz.headers["content-encoding"] == "gzip"
