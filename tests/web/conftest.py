"""A real board with the demo's simulated hosts, served on loopback, and Debian's Chromium.

The board runs in the test's own event loop (uvicorn.Server via board.demo.serve_demo),
against the per-test database of tests/conftest.py, so the browser talks HTTP to exactly
what `gua-board demo` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.web.helpers import WIDTHS

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
