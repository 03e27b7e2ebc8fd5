"""The fleet page's live heat-map in Debian's Chromium: cells drawn from the agents' live
samples (the fleet's frames), at 1280 and 390 px, readable, and reachable by keyboard."""

from __future__ import annotations

import contextlib
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.board.builders import enroll, make_tenant
from tests.board.test_reports_builders import gpu
from tests.board.test_stream import serve
from tests.board.test_stream_fleet import streaming
from tests.web.helpers import PASSWORD, observe, screenshots
from tests.web.test_fleet_scale import _assert_contrast

HOSTS = 6
GPUS = 4
# Each streaming host's utilization: one host per band, and one that does not stream.
UTILS = [5, 25, 45, 65, 95]
BANDS = ["u0", "u1", "u2", "u3", "u4"]


async def _wait(page: Any, script: str, arg: Any, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not await page.evaluate(script, arg):
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        await page.wait_for_timeout(200)


async def _active(page: Any) -> dict[str, Any]:
    value: dict[str, Any] = await page.evaluate(
        """() => { const el = document.activeElement;
          return {inGrid: !!el.closest('.live-grid'), label: el.getAttribute('aria-label'),
                  text: el.textContent, gpu: el.dataset.gpu || null,
                  host: (el.closest('[role=row]') || {dataset: {}}).dataset.host || null}; }"""
    )
    return value


async def test_the_live_heat_map_draws_streamed_samples(app: Any, client: Any, page: Any) -> None:
    tenant = await make_tenant(app, "acme")
    hosts = []
    at = datetime.now(UTC) - timedelta(seconds=20)
    for n in range(HOSTS):
        host = await enroll(client, tenant, f"node-{n:02d}")
        await observe(client, host["agentToken"], at, [gpu(g) for g in range(GPUS)])
        hosts.append(host)
    uuids = tuple(f"GPU-{g}" for g in range(GPUS))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    async with serve(app) as base, contextlib.AsyncExitStack() as agents:
        for host, util in zip(hosts, UTILS, strict=False):  # the last host does not stream
            await agents.enter_async_context(streaming(base, host["agentToken"], uuids, util))
        await page.goto(f"{base}/signin")
        await page.fill("#email", "member@acme.example")
        await page.fill("#password", PASSWORD)
        await page.click("form button[type=submit]")
        await page.wait_for_url(re.compile(r".*/w/acme/$"))
        await page.goto(f"{base}/w/acme/?view=live")
        # Every host listed, one cell per GPU; the streaming ones coloured by their band.
        await page.locator(".live-row").first.wait_for()
        assert await page.locator(".live-row").count() == HOSTS
        assert await page.locator(".live-grid [role=gridcell]").count() == HOSTS * GPUS
        for host, band, util in zip(hosts, BANDS, UTILS, strict=False):
            cell = f'[data-gpu="{host["hostId"]}/GPU-2"]'
            await _wait(
                page,
                "([sel, band]) => { const el = document.querySelector(sel);"
                " return el && el.classList.contains(band); }",
                [cell, band],
                f"{host['hostId']} drawn as {band}",
            )
            assert await page.inner_text(cell) == str(util)
            label = await page.get_attribute(cell, "aria-label")
            assert label == f"node-{hosts.index(host):02d}, GPU 2: {util} % utilization, " + (
                "70000 MB memory used"
            )
            assert await page.get_attribute(cell, "title") == label
        silent = f'[data-gpu="{hosts[-1]["hostId"]}/GPU-0"]'
        assert await page.inner_text(silent) == "–"
        assert "quiet" in (await page.get_attribute(silent, "class") or "")
        summary = await page.inner_text("[data-live-summary]")
        assert summary.startswith(f"5 of {HOSTS} hosts streaming, {5 * GPUS} GPUs: mean 47 %")
        # Readable: every text on its cell and the key at least 4.5:1.
        for selector in (".lcell", ".lkey", ".live-host a", ".live-summary"):
            await _assert_contrast(page, selector)

        # The page no longer polls fleet.json while the live map shows (one load, at most).
        polled = sum("fleet.json" in url for url in requests)
        await page.wait_for_timeout(6000)
        assert sum("fleet.json" in url for url in requests) == polled

        # One Tab stop: Tab reaches the first host's name, arrows move inside the map.
        await page.locator("#f-view").focus()
        for _ in range(80):
            await page.keyboard.press("Tab")
            if (await _active(page))["inGrid"]:
                break
        now = await _active(page)
        assert now["host"] == hosts[0]["hostId"]
        assert now["text"] == "node-00"
        await page.keyboard.press("ArrowRight")
        now = await _active(page)
        assert now["gpu"] == f"{hosts[0]['hostId']}/GPU-0"
        assert now["label"].startswith("node-00, GPU 0: 5 % utilization")
        await page.keyboard.press("ArrowDown")
        assert (await _active(page))["gpu"] == f"{hosts[1]['hostId']}/GPU-0"
        await page.keyboard.press("End")
        assert (await _active(page))["gpu"] == f"{hosts[1]['hostId']}/GPU-{GPUS - 1}"
        await page.keyboard.press("Control+End")
        assert (await _active(page))["gpu"] == f"{hosts[-1]['hostId']}/GPU-{GPUS - 1}"
        await page.keyboard.press("Home")
        assert (await _active(page))["text"] == f"node-{HOSTS - 1:02d}"
        # Tab leaves the map at once: its 30 cells are not 30 stops.
        await page.keyboard.press("Tab")
        assert not (await _active(page))["inGrid"]
        # Back in, the map remembers where the reader was.
        await page.keyboard.press("Shift+Tab")
        assert (await _active(page))["text"] == f"node-{HOSTS - 1:02d}"

        # At 390 px every host's row of cells fits the screen.
        await page.set_viewport_size({"width": 390, "height": 900})
        edges = await page.evaluate(
            "() => Array.from(document.querySelectorAll('.lcell'))"
            ".map(el => { const r = el.getBoundingClientRect(); return [r.width, r.right]; })"
        )
        assert len(edges) == HOSTS * GPUS
        assert all(width > 0 and right <= 390 for width, right in edges), edges
        await screenshots(page, "fleet-live")
        await page.goto("about:blank")  # the stream closed before the board stops
