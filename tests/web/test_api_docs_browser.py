"""/docs and /redoc in Debian's Chromium: the operations show, from the board alone.

The page fixture fails a test on any console error, so a script or style the page's CSP
blocks fails it too; every request must stay on the board's own origin."""

from __future__ import annotations

from typing import Any

from tests.web.helpers import WIDTHS


def _stay_home(page: Any, origin: str) -> list[str]:
    """The URLs of other origins that answered the page (a request the CSP blocks never
    leaves the browser, so it gets no answer)."""
    elsewhere: list[str] = []
    page.on(
        "response",
        lambda response: (
            None
            if response.url.startswith((origin, "data:", "blob:"))
            else elsewhere.append(response.url)
        ),
    )
    return elsewhere


async def test_swagger_ui_lists_the_operations_and_the_bearer_schemes(demo, page) -> None:
    elsewhere = _stay_home(page, demo.url)
    await page.goto(f"{demo.url}/docs")
    await page.wait_for_selector(".opblock-summary-path", timeout=60_000)
    paths = await page.locator(".opblock-summary-path").all_inner_texts()
    assert len(paths) >= 40, paths
    assert any(p.endswith("/api/v1/workspaces/{slug}/hosts") for p in paths), paths
    summaries = await page.locator(".opblock-summary-description").all_inner_texts()
    assert "List hosts" in summaries
    await page.get_by_role("button", name="Authorize").first.click()
    dialog = await page.locator(".auth-container").all_inner_texts()
    assert any("apiToken" in text for text in dialog), dialog
    assert any("agentToken" in text for text in dialog), dialog
    assert not elsewhere, elsewhere


# ReDoc's bundle draws Redocly's logo from Redocly's CDN in its menu; the page's CSP
# blocks it (so nothing is fetched from elsewhere), and Chromium says so on the console.
REDOCLY_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


async def test_redoc_shows_the_reference(demo, browser) -> None:
    context = await browser.new_context(viewport={"width": WIDTHS[0], "height": 900})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    elsewhere = _stay_home(page, demo.url)
    try:
        await page.goto(f"{demo.url}/redoc")
        await page.locator("h2", has_text="List hosts").first.wait_for(timeout=60_000)
        await page.get_by_text("apiToken").first.wait_for(timeout=15_000)
    finally:
        await context.close()
    assert not elsewhere, elsewhere
    assert [e for e in errors if REDOCLY_LOGO not in e] == [], errors
