"""In Chromium (Debian's): a GPU card of the demo's fleet names the job holding it, linked
to the job's page, whose fields (a hostile name among them, shown as text), allocation,
figures and utilization chart fit at 1280 and 390 px without sideways scrolling."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from tests.board.job_rows import add_job
from tests.web.helpers import browser_sign_in, screenshots

HOSTILE = '<img src=x onerror="alert(1)">train & eval'


async def test_the_card_names_the_job_and_its_page_opens(demo: Any, page: Any) -> None:
    node = next(h for h in demo.hosts if h.role == "ok")
    app = SimpleNamespace(state=SimpleNamespace(runtime=demo.runtime))
    started = datetime.now(UTC) - timedelta(minutes=25)
    job = await add_job(app, node.host_id, [0, 1], started=started, name=HOSTILE, user="alice")
    await browser_sign_in(page, demo, "admin@demo.example")
    await page.goto(f"{demo.url}/w/demo/hosts/{node.host_id}")
    line = page.locator("#gpu-0 .job-line")
    await line.wait_for()
    text = await line.inner_text()
    assert re.match(
        r"job 4711 · alice · (active|foreign(: .+)?|(unused|idle-held)( for .+)?|not observed)$",
        text,
    ), text
    await screenshots(page, "job-card")

    await page.goto(f"{demo.url}/w/demo/")
    card_line = page.locator(f'article.gpu[data-gpu^="{node.host_id}/"] .job-line').first
    await card_line.wait_for()
    await card_line.locator("a").click()
    await page.wait_for_url(re.compile(f".*/w/demo/jobs/{job}$"))
    assert await page.locator("h1").inner_text() == "Job 4711 hpc"
    # The hostile name is text: no element made of it.
    assert await page.locator('[data-field="name"]').inner_text() == HOSTILE
    assert await page.locator("#job-fields img").count() == 0
    assert await page.locator("#job-allocation tr[data-device]").count() == 2
    assert await page.locator("#job-allocation svg").count() >= 1
    await screenshots(page, "job")
