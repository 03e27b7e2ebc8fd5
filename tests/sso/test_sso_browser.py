"""The whole single sign-on in Debian's Chromium: the board's button, the provider's login
and consent pages, and back on the board signed in."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import pytest
import uvicorn

from board.app import create_app
from tests.board.builders import make_tenant
from tests.sso.conftest import sso_settings, wait_until
from tests.web.conftest import CHROMIUM, CHROMIUM_ARGS


async def test_sign_in_with_the_provider_in_a_browser(settings: Any, oidc_provider: Any) -> None:
    if not CHROMIUM.exists():
        pytest.skip("browser tests need Debian's Chromium at /usr/bin/chromium")
    from playwright.async_api import async_playwright

    port = oidc_provider.live_board_port
    configured = sso_settings(settings, oidc_provider, allowed_domains=["acme.example"])
    app = create_app(configured, run_maintenance=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())

    async def started() -> bool:
        assert not serving.done(), "the board did not start"
        return bool(server.started)

    try:
        await wait_until(started)
        await make_tenant(app, "acme")
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page()
                page.set_default_timeout(30_000)
                await page.goto(f"http://127.0.0.1:{port}/w/acme/")
                await page.wait_for_url(re.compile(r".*/signin\?next="))
                await page.click("text=Sign in with Test IdP")
                # The provider's own pages: any login is accepted; the login is the email.
                await page.wait_for_url(re.compile(rf"^{re.escape(oidc_provider.issuer)}/"))
                await page.fill("input[name=login]", "admin@acme.example")
                await page.fill("input[name=password]", "anything")
                await page.click("button[type=submit]")
                await page.click("button[type=submit]")  # consent: Continue
                await page.wait_for_url(f"http://127.0.0.1:{port}/w/acme/")
                assert "admin@acme.example" in await page.content()
            finally:
                await browser.close()
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await serving
