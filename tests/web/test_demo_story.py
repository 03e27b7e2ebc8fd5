"""`gua-board demo` tells one story: its pages agree with each other, it has weeks of past,
and its figures are the board's own (the rollups equal `rollups rebuild`).

The fleet's "N GPUs on M hosts" is what the usage and utilization reports saw today; the
host in error (broken since before today) has GPUs in its past and none, billed or
observed, since it broke; the usage chart has a bar for every day of four weeks; and the
lab has teams, bookings, a price and notices delivered to its channel.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import select

from board.cli.rollups import rebuild_command
from board.db.urls import libpq_url
from board.demo_history import HISTORY
from board.hosts.models import Host
from tests.board.test_reports_builders import day_rollups_mismatch, rollup_rows, workspace_id
from tests.web.helpers import screenshots, sign_in
from tests.web.test_browser import api_token, browser_sign_in, host_of

# The whole demo, as `gua-board demo` runs it.
WHOLE = pytest.mark.parametrize("demo", [{"history": HISTORY, "story": True}], indirect=True)


async def _until(check: Callable[[], Awaitable[bool]], what: str, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        await asyncio.sleep(0.5)


async def _report(client: httpx.AsyncClient, token: str, kind: str, **query: str) -> Any:
    r = await client.get(
        f"/api/v1/workspaces/demo/reports/{kind}",
        params=query,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 200, r.text
    return r.json()


def _gpus(rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(r["hostId"], r["gpuUuid"]) for r in rows if r.get("coveredHours", 1) > 0}


@WHOLE
async def test_the_demo_pages_tell_one_story(demo: Any, settings: Any) -> None:
    await asyncio.wait_for(demo.backfilled.wait(), timeout=600)
    assert not demo.failures, demo.failures
    demo.paused = True  # the figures hold still while they are compared
    await asyncio.sleep(demo.interval + 1)
    finance = await api_token(demo, "finance@demo.example")
    admin = await api_token(demo, "admin@demo.example")
    now = datetime.now(UTC)
    today, tomorrow = now.date(), now.date() + timedelta(days=1)
    error = host_of(demo, "error")
    assert error.broken_since is not None
    midnight = datetime(today.year, today.month, today.day, tzinfo=UTC)
    assert error.broken_since < midnight
    # The stale host went quiet minutes before the demo started: in the first minutes of a
    # day it has no sample today, so today's reports rightly leave its GPUs out.
    stale = host_of(demo, "stale")
    async with demo.runtime.sessions() as session:
        stale_seen = await session.scalar(
            select(Host.latest_observed_at).where(Host.public_id == uuid.UUID(stale.host_id))
        )
    assert stale_seen is not None
    quiet_today = len(stale.fake.collect(now).gpus) if stale_seen < midnight else 0

    async with httpx.AsyncClient(base_url=demo.url, timeout=60) as client:
        await sign_in(client, "admin@demo.example", demo.password)
        fleet = (await client.get("/w/demo/")).text
        shown = re.search(r"(\d+) GPUs on (\d+) host", fleet)
        assert shown, fleet[:2000]
        gpus, hosts = int(shown[1]), int(shown[2])
        assert hosts == len(demo.hosts)

        # Today's reports saw exactly the GPUs the fleet counts.
        day = {"from": today.isoformat(), "to": tomorrow.isoformat()}
        usage = await _report(client, finance, "usage", groupBy="gpu", **day)
        util = await _report(client, finance, "utilization", groupBy="gpu", bucket="day", **day)
        assert len(_gpus(usage["rows"])) == gpus - quiet_today
        assert len(_gpus(util["rows"])) == gpus - quiet_today
        assert error.host_id not in {h for h, _ in _gpus(usage["rows"])}

        # The error host: four GPUs billed before it broke, nothing since.
        hour = error.broken_since.replace(minute=0) + timedelta(hours=1)
        since = {"from": hour.isoformat(), "to": tomorrow.isoformat()}
        by_host = await _report(client, finance, "usage", groupBy="host", **since)
        assert error.host_id not in {r["hostId"] for r in by_host["rows"]}
        week = {
            "from": (today - timedelta(days=8)).isoformat(),
            "to": (today - timedelta(days=3)).isoformat(),
        }
        before = await _report(client, finance, "usage", groupBy="gpu", **week)
        assert len({u for h, u in _gpus(before["rows"]) if h == error.host_id}) == 4
        assert before["totals"]["cost"] is not None  # the price holds from the first day

        # Four weeks of bars; teams from the directory; bookings idle under dave.
        first = (now - HISTORY).date() + timedelta(days=1)
        month = {"from": first.isoformat(), "to": tomorrow.isoformat()}
        days = await _report(client, finance, "usage", groupBy="day", **month)
        assert len(days["rows"]) == (tomorrow - first).days
        teams = await _report(client, finance, "usage", groupBy="team", **month)
        assert {"vision", "language"} <= {r["team"] for r in teams["rows"]}
        booked = await client.get(
            "/api/v1/workspaces/demo/reservations",
            params={"from": first.isoformat(), "to": (tomorrow + timedelta(days=1)).isoformat()},
            headers={"Authorization": f"Bearer {admin}"},
        )
        assert booked.status_code == 200, booked.text
        emails = [r["memberEmail"] for r in booked.json()["reservations"]]
        assert emails.count("dave@demo.example") >= 4
        assert "carol@demo.example" in emails

        # The channel hears of the open episodes (bob's cards, the broken host).
        async def delivered() -> bool:
            r = await client.get(
                "/api/v1/workspaces/demo/notifications",
                params={"status": "delivered"},
                headers={"Authorization": f"Bearer {admin}"},
            )
            return {"gpu.idle_held", "host.error"} <= {d["type"] for d in r.json()["notifications"]}

        await _until(delivered, "notices delivered to the demo's mail channel")

    # The demo's rollups are what a rebuild from its raw samples gives.
    url = libpq_url(demo.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ws = await workspace_id(conn, "demo")
        written = await rollup_rows(conn, ws)
        assert written[0], "no rollups"
        args = argparse.Namespace(workspace="demo", from_=None, to=None)
        assert await asyncio.to_thread(rebuild_command, args, settings) == 0
        assert await rollup_rows(conn, ws) == written
        assert await day_rollups_mismatch(conn, ws) == []


@WHOLE
async def test_the_demo_pages_at_both_widths(demo: Any, page: Any) -> None:
    await asyncio.wait_for(demo.backfilled.wait(), timeout=600)
    await browser_sign_in(page, demo, "admin@demo.example")
    ok = host_of(demo, "ok")
    for name, path in (
        ("demo-fleet", "/w/demo/"),
        ("demo-usage", "/w/demo/usage"),
        ("demo-host-30d", f"/w/demo/hosts/{ok.host_id}?range=30d"),
        ("demo-error-host-7d", f"/w/demo/hosts/{host_of(demo, 'error').host_id}?range=7d"),
        ("demo-reservations", "/w/demo/reservations"),
        ("demo-notices", "/w/demo/admin/notices"),
    ):
        r = await page.goto(f"{demo.url}{path}")
        assert r is not None
        assert r.status == 200, path
        await screenshots(page, name)
