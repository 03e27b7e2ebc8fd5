"""A real board with the demo's simulated hosts, served on loopback, and Debian's Chromium.

The board runs in the test's own event loop (uvicorn.Server via board.demo.serve_demo),
against the per-test database of tests/conftest.py, so the browser talks HTTP to exactly
what `gua-board demo` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.board.builders import Tenant, enroll
from tests.board.test_reports_builders import gpu, proc
from tests.web.helpers import WIDTHS, observe, signed_in

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DEMO_HOSTS = 6  # one of each role: ok, ok, partial, error, stale, never


@pytest.fixture
async def demo(settings: Any, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The demo's hosts with half an hour of history and no story (teams, bookings, price,
    channel), so each test starts from a bare lab; a test may ask for the whole demo by an
    indirect param ({"history": …, "story": True})."""
    from board.demo import serve_demo

    asked: dict[str, Any] = getattr(request, "param", {})
    history: timedelta = asked.get("history", timedelta(minutes=30))

    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def on_ready(d: Any) -> None:
        ready.set_result(d)

    task = asyncio.create_task(
        serve_demo(
            settings,
            "127.0.0.1",
            0,
            DEMO_HOSTS,
            interval=1.0,
            on_ready=on_ready,
            backfill=history,
            story=asked.get("story", False),
        )
    )
    done, _ = await asyncio.wait({task, ready}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if ready not in done:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        pytest.fail("the demo board did not start")
    running = ready.result()
    try:
        yield running
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert not running.failures, running.failures


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(
            "browser tests need Debian's Chromium at /usr/bin/chromium "
            "(apt-get install -y chromium); no downloaded browser is used"
        )
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Any]:
    context = await browser.new_context(viewport={"width": WIDTHS[0], "height": 900})
    context.set_default_timeout(15_000)
    opened = await context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.on(
        "console",
        lambda msg: (
            errors.append(msg.text)
            if msg.type == "error" and "status of 40" not in msg.text
            else None
        ),
    )
    try:
        yield opened
    finally:
        await context.close()
    assert not errors, f"the page logged errors: {errors}"


@pytest.fixture
async def fleet(app: Any, client: httpx.AsyncClient) -> tuple[Tenant, str]:
    """A signed-in admin's workspace with a host whose GPU 0 `a_b` holds idle and whose
    GPU 1 `axb` holds busy; the host's id."""
    tenant = await signed_in(app, client, "fleetparams")
    host = await enroll(client, tenant, "params-node")
    at = datetime.now(UTC) - timedelta(seconds=30)
    await observe(
        client,
        host["agentToken"],
        at,
        [
            gpu(0, util=0, state="idle_held", procs=[proc("a_b")]),
            gpu(1, util=90, state="active", procs=[proc("axb")]),
        ],
    )
    return tenant, str(host["hostId"])
