"""The jobs page in Debian's Chromium: the window's jobs, the most wasted first, each
linking to its own page; re-sorted by keyboard; the account (team) view with wasted
hours per team; a filter by user; at 1280 and 390 px; text contrast at least 4.5:1. The
directory page maps an account to a team."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from board.db.urls import libpq_url
from tests.web.helpers import browser_sign_in, screenshots
from tests.web.test_browser import api_token
from tests.web.test_budgets_browser import _text_contrast

HOUR_US = 3_600_000_000


async def _jobs(demo: Any) -> dict[str, str]:
    """Three jobs of the last day on the demo's first host, with hand-made figures:
    4711 wastes most, 4712 is busy, 4713 (carol) wastes a little. {jobId: publicId}."""
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=6)
    url = libpq_url(demo.runtime.database_url)
    public: dict[str, str] = {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT g.workspace_id, g.host_id, g.id FROM gpus g JOIN workspaces w "
            "ON w.id = g.workspace_id WHERE w.slug = %s ORDER BY g.host_id, g.gpu_index LIMIT 2",
            [demo.slug],
        )
        (ws, host, gpu0), (_, _, gpu1) = await cur.fetchall()
        jobs = [
            ("4711", "alice", "proj-a", [(gpu0, 0.1, 0.4, 0.5)], "=cmd|' /C calc'!A0"),
            ("4712", "bob", "proj-a", [(gpu1, 1.0, 0.0, 0.0)], "train"),
            ("4713", "carol", "proj-b", [(gpu0, 0.8, 0.2, 0.0)], "eval"),
        ]
        for i, (job_id, user, account, gpus, name) in enumerate(jobs):
            public[job_id] = str(uuid.uuid4())
            begin = start + timedelta(hours=2 * i)
            cur = await conn.execute(
                "INSERT INTO scheduler_jobs (workspace_id, public_id, cluster, raw_job_id, "
                "job_id, linux_user, account, partition, name, state, started_at, ended_at) "
                "VALUES (%s, %s, 'hpc', %s, %s, %s, %s, 'gpu', %s, 'COMPLETED', %s, %s) "
                "RETURNING id",
                [
                    ws,
                    public[job_id],
                    job_id,
                    job_id,
                    user,
                    account,
                    name,
                    begin,
                    begin + timedelta(hours=2),
                ],
            )
            row = await cur.fetchone()
            assert row is not None
            for device, (gpu_id, active, idle, unused) in enumerate(gpus):
                await conn.execute(
                    "INSERT INTO job_gpus (workspace_id, job_id, host_id, device, during, "
                    "linux_user) SELECT %s, %s, %s, %s, tstzrange(%s, %s), "
                    "(SELECT linux_user FROM scheduler_jobs WHERE id = %s)",
                    [ws, row[0], host, device, begin, begin + timedelta(hours=2), row[0]],
                )
                for hour in (begin, begin + timedelta(hours=1)):
                    parts = [round(x * HOUR_US) for x in (active, idle, unused)]
                    await conn.execute(
                        "INSERT INTO job_hour_figures (workspace_id, job_id, gpu_id, hour_start, "
                        "host_id, covered_us, active_us, idle_held_us, unused_us, util_pct_us, "
                        "max_memory_used_mb) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 100)",
                        [ws, row[0], gpu_id, hour, host, sum(parts), *parts, 70 * parts[0]],
                    )
    return public


async def test_jobs_page_waste_first_keyboard_teams_widths_contrast(demo, page) -> None:
    public = await _jobs(demo)
    token = await api_token(demo, "admin@demo.example")
    r = await demo.client.put(
        f"/api/v1/workspaces/{demo.slug}/directory/accounts/proj-a",
        json={"team": "vision"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 200, r.text
    await browser_sign_in(page, demo, "admin@demo.example")
    await page.click("nav >> text=Jobs")
    await page.wait_for_selector("#jobs-table")
    rows = page.locator("#jobs-table tbody tr")
    assert await rows.count() == 3
    # The most wasted first: 4711 (1.8 h idle-held or unused), then 4713, then 4712.
    firsts = [await rows.nth(i).locator("th a").inner_text() for i in range(3)]
    assert firsts == ["4711", "4713", "4712"]
    href = await rows.nth(0).locator("th a").get_attribute("href")
    assert href == f"/w/{demo.slug}/jobs/{public['4711']}"
    # The job's name is text, never markup or a formula run.
    assert "=cmd|' /C calc'!A0" in await rows.nth(0).inner_text()
    wasted = await rows.nth(0).locator("td").nth(8).inner_text()
    assert wasted == "1.80"
    for selector in ("#jobs-table tbody td", "#jobs-table tbody th a", "p.muted.small"):
        assert await _text_contrast(page, selector) >= 4.5, selector
    await screenshots(page, "jobs")

    # Keyboard alone: focus the Efficiency header's button and press Enter (highest first).
    button = page.locator("#jobs-table thead th", has_text="Efficiency").locator("button")
    await button.focus()
    await page.keyboard.press("Enter")
    firsts = [await rows.nth(i).locator("th a").inner_text() for i in range(3)]
    assert firsts == ["4712", "4713", "4711"]

    # The account (team) view: wasted hours per account and per team.
    await page.goto(f"{demo.url}/w/{demo.slug}/jobs?groupBy=account")
    await page.wait_for_selector("#team-table")
    teams = await page.inner_text("#team-table tbody")
    assert teams.index("vision") < teams.index("No team")
    accounts = await page.inner_text("#jobs-table tbody")
    assert "proj-a" in accounts
    assert "vision" in accounts
    assert await _text_contrast(page, "#team-table tbody td") >= 4.5
    await screenshots(page, "jobs-accounts")

    # From an account to its jobs, and a filter by user.
    await page.click("#jobs-table tbody th a >> text=proj-b")
    await page.wait_for_selector("#jobs-table")
    assert [await rows.nth(i).locator("th a").inner_text() for i in range(await rows.count())] == [
        "4713"
    ]
    await page.fill("#j-account", "")
    await page.fill("#j-user", "bob")
    await page.keyboard.press("Enter")
    await page.wait_for_url(lambda u: "user=bob" in u)
    assert [await rows.nth(i).locator("th a").inner_text() for i in range(await rows.count())] == [
        "4712"
    ]

    # The directory page maps another account to a team.
    await page.goto(f"{demo.url}/w/{demo.slug}/admin/directory")
    await page.fill("#a-account", "proj-b")
    await page.fill("#a-team", "nlp")
    await page.keyboard.press("Enter")
    await page.wait_for_selector('#dir-accounts tr[data-account="proj-b"]')
    assert "nlp" in await page.inner_text('#dir-accounts tr[data-account="proj-b"]')
