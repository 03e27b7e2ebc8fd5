"""The host page: history over a chosen range with a time axis in the workspace zone,
one colour per GPU (16 at most), and a live chart that draws each GPU once."""

from __future__ import annotations

import re
import zoneinfo
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from playwright.async_api import expect

from board.web.charts import SERIES_CLASSES, axis_for, percent_chart, time_ticks
from tests.web.helpers import browser_sign_in, screenshots
from tests.web.test_contrast import contrast

CSS = Path(__file__).resolve().parents[2] / "board" / "web" / "static" / "board.css"
SERIES = re.compile(r"\.series-(\d+) \{ stroke: (#[0-9a-f]{6}); \}")


def host_of(demo: Any, role: str) -> Any:
    return next(h for h in demo.hosts if h.role == role)


def test_sixteen_gpu_colours_are_distinct_and_readable_on_the_chart() -> None:
    colours = dict(SERIES.findall(CSS.read_text()))
    assert sorted(int(n) for n in colours) == list(range(SERIES_CLASSES)) == list(range(16))
    assert len(set(colours.values())) == 16
    for n, colour in colours.items():
        assert contrast(colour, "#ffffff") >= 3.0, f"series-{n} {colour}"
    point: tuple[datetime, float | None] = (datetime(2026, 1, 1, tzinfo=UTC), 50.0)
    series = {f"GPU {i}": [point] for i in range(16)}
    start = datetime(2026, 1, 1, tzinfo=UTC)
    chart = percent_chart("u", start, start + timedelta(hours=6), UTC, series)
    assert len({line.css for line in chart.lines}) == 16


def test_time_ticks_are_labelled_in_the_workspace_zone_across_dst() -> None:
    berlin = zoneinfo.ZoneInfo("Europe/Berlin")
    # 2026-03-29: clocks jump from 02:00 to 03:00 in Berlin.
    start = datetime(2026, 3, 28, 23, 0, tzinfo=UTC)
    end = start + timedelta(hours=24)
    ticks = time_ticks(start, end, berlin, axis_for(end - start))
    labels = [t.astimezone(berlin).strftime("%H:%M") for t in ticks]
    # Local midnight to 01:00 the next day, a 23-hour local day: every 4 hours by the clock.
    assert labels == ["00:00", "04:00", "08:00", "12:00", "16:00", "20:00", "00:00"]
    assert ticks[1] - ticks[0] == timedelta(hours=3)
    week = time_ticks(start, start + timedelta(days=7), berlin, axis_for(timedelta(days=7)))
    assert all(t.astimezone(berlin).hour == 0 for t in week)
    dates = [t.astimezone(berlin).date() for t in week]
    # Seven UTC days from local midnight end at 01:00 local (one hour lost): 8 midnights.
    assert [(d - dates[0]).days for d in dates] == list(range(8))
    # Kolkata is UTC+5:30: a tick still sits where its clocks show a whole hour.
    kolkata = zoneinfo.ZoneInfo("Asia/Kolkata")
    six = time_ticks(start, start + timedelta(hours=6), kolkata, axis_for(timedelta(hours=6)))
    assert {t.astimezone(kolkata).minute for t in six} == {0}
    assert len(six) == 6


async def live_series(page: Any) -> list[str]:
    lines = page.locator("[data-live-target] svg polyline")
    return [await line.get_attribute("data-series") for line in await lines.all()]


async def test_ranges_axis_legend_and_one_live_line_per_gpu(demo: Any, page: Any) -> None:
    host = host_of(demo, "ok")
    await browser_sign_in(page, demo, "lead@demo.example")
    await page.goto(f"{demo.url}/w/{demo.slug}/hosts/{host.host_id}")
    # The live chart: each GPU once, from the first draw on (the stream's kept history
    # arrives before the first snapshot; both are keyed by GPU UUID).
    await page.wait_for_selector("[data-live-target] svg polyline", timeout=15_000)
    for _ in range(6):
        drawn = await live_series(page)
        assert len(drawn) == len(set(drawn)), drawn
        assert len(drawn) <= 4
        await page.wait_for_timeout(500)
    await expect(page.locator("[data-live-note]")).to_have_text(
        "(streamed by the agent, every second)", timeout=15_000
    )
    drawn = await live_series(page)
    assert sorted(drawn) == sorted(set(drawn))
    assert len(drawn) == 4
    legend = await page.locator("[data-live-target] .chart-legend li").all_inner_texts()
    assert [t.split(":")[0] for t in legend] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]

    # The default range: 24 h of 15-minute averages, ticks every 4 hours.
    history = page.locator("[data-history]")
    assert await history.get_attribute("data-history") == "24h"
    assert await page.locator('.range-picker a[aria-current="true"]').inner_text() == "24 h"
    ticks = await page.locator("figure.chart svg text.tick").all_text_contents()
    assert any(re.fullmatch(r"\d\d:00", t) for t in ticks), ticks
    util = page.locator("figure.chart").first
    assert "15-minute" in (await util.locator("svg").get_attribute("aria-label") or "")
    paths = await util.locator("path.line").evaluate_all("ps => ps.map(p => p.dataset.series)")
    assert len(paths) == len(set(paths)) >= 1
    legend = await util.locator(".chart-legend li").all_inner_texts()
    assert legend == sorted(set(legend), key=lambda t: int(t.split()[-1]))

    # The live chart and the history give a GPU the same colour.
    live_css = await page.locator("[data-live-target] svg polyline").evaluate_all(
        "ls => Object.fromEntries(ls.map(l => [l.dataset.series, l.getAttribute('class')]))"
    )
    gpus = await page.locator("[data-live-chart]").get_attribute("data-gpus")
    assert gpus is not None
    for uuid, css in live_css.items():
        assert uuid in gpus
        assert css.startswith("line series-")

    # By keyboard: Tab to "7 d" and Enter; the range is in the URL, read from rollups.
    seven = page.locator('.range-picker a[data-range="7d"]')
    await seven.focus()
    await page.keyboard.press("Enter")
    await page.wait_for_url(re.compile(r".*\?range=7d"))
    assert await page.locator('.range-picker a[aria-current="true"]').inner_text() == "7 d"
    label = await page.locator("figure.chart svg").first.get_attribute("aria-label")
    assert label is not None
    assert "hourly averages" in label
    ticks = await page.locator("figure.chart").first.locator("text.tick").all_text_contents()
    days = [t for t in ticks if re.fullmatch(r"[A-Z][a-z]{2} \d\d", t)]
    assert 6 <= len(days) <= 8, ticks
    await screenshots(page, "host-7d")

    await page.goto(f"{demo.url}/w/{demo.slug}/hosts/{host.host_id}?range=6h")
    assert await page.locator("[data-history]").get_attribute("data-history") == "6h"
    await screenshots(page, "host-6h")
    # An unknown range is the default, not an error.
    r = await page.goto(f"{demo.url}/w/{demo.slug}/hosts/{host.host_id}?range=1y")
    assert r is not None
    assert r.status == 200
    assert await page.locator("[data-history]").get_attribute("data-history") == "24h"
