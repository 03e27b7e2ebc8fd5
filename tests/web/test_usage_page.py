"""The usage page: sortable columns (idle-held first by default), the "last week" preset,
GPU-hours per day stacked active / idle-held, and the CSV named by its days."""

from __future__ import annotations

import zoneinfo
from datetime import date, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

from board.web.charts import day_columns
from tests.web.helpers import browser_sign_in, screenshots


def test_day_columns_stack_idle_held_on_active() -> None:
    chart = day_columns([("2026-11-23", 10.0, 5.0), ("2026-11-24", 0.0, 0.0)])
    first, empty = chart.columns
    x0, y0, x1, y1 = chart.plot
    assert first.active_y + first.active_h == y1
    assert first.idle_held_y + first.idle_held_h == first.active_y
    assert first.idle_held_h == first.active_h / 2
    assert (empty.active_h, empty.idle_held_h) == (0, 0)
    assert chart.y_ticks[-1][1] == "20"  # the next 1-2-5 step above 15 GPU-hours
    assert [label for _, label in chart.x_ticks] == ["11-23", "11-24"]


async def column(page: Any, n: int) -> list[str]:
    cells = page.locator(f"#usage-table tbody tr > :nth-child({n})")
    return [str(t) for t in await cells.all_text_contents()]


async def values(page: Any, n: int) -> list[float]:
    cells = page.locator(f"#usage-table tbody tr > :nth-child({n})")
    return [float(v) for v in await cells.evaluate_all("cs => cs.map(c => c.dataset.value)")]


async def test_sorting_presets_day_chart_and_csv_name(demo: Any, page: Any) -> None:
    await demo.backfilled.wait()
    await browser_sign_in(page, demo, "lead@demo.example")
    await page.goto(f"{demo.url}/w/{demo.slug}/usage")
    await page.wait_for_selector("#usage-table tbody tr")
    heads = page.locator("#usage-table thead th")
    # Default: idle-held GPU-hours, largest first (column 4).
    assert await heads.nth(3).get_attribute("aria-sort") == "descending"
    idle = await values(page, 4)
    assert len(idle) >= 2
    assert idle == sorted(idle, reverse=True)

    # A click on "Held" sorts by it, largest first; again, smallest first.
    await heads.nth(1).locator("button").click()
    held = await values(page, 2)
    assert held == sorted(held, reverse=True)
    assert await heads.nth(1).get_attribute("aria-sort") == "descending"
    assert await heads.nth(3).get_attribute("aria-sort") == "none"
    await heads.nth(1).locator("button").click()
    assert await values(page, 2) == sorted(held)
    assert await heads.nth(1).get_attribute("aria-sort") == "ascending"

    # By keyboard: the first header's button takes focus; Enter sorts names A to Z.
    names_button = heads.nth(0).locator("button")
    await names_button.focus()
    await page.keyboard.press("Enter")
    names = [n.strip().lower() for n in await column(page, 1)]
    assert names == sorted(names)
    assert await heads.nth(0).get_attribute("aria-sort") == "ascending"
    # The total row stays last.
    assert (await page.locator("#usage-table tfoot th").inner_text()).strip() == "Total"

    # GPU-hours per day: a column per day of the window, today's included.
    tz = await page.locator("#u-tz").input_value()
    today = datetime.now(zoneinfo.ZoneInfo(tz)).date()
    days = await page.locator(".day-chart g[data-day]").evaluate_all(
        "gs => gs.map(g => g.dataset.day)"
    )
    assert today.isoformat() in days
    assert days == sorted(days)
    await screenshots(page, "usage")

    # Per month (the form's "Month"): a row per local month with data (the demo's half
    # hour: this one, and the one before just after a month began), the day chart kept.
    await page.select_option("#u-group", "month")
    await page.locator(".report-form button[type=submit]").click()
    await page.wait_for_url(lambda url: "groupBy=month" in url)
    await page.wait_for_selector("#usage-table tbody tr")
    assert (await page.locator("#chart-title").inner_text()).strip() == "Held GPU-hours per month"
    assert (await heads.nth(0).inner_text()).strip() == "Month"
    months = [m.strip() for m in await column(page, 1)]
    assert today.strftime("%Y-%m") in months
    assert set(months) <= {
        today.strftime("%Y-%m"),
        (today.replace(day=1) - timedelta(1)).strftime("%Y-%m"),
    }
    assert await page.locator("#u-group").input_value() == "month"
    month_days = await page.locator(".day-chart g[data-day]").evaluate_all(
        "gs => gs.map(g => g.dataset.day)"
    )
    assert month_days == days
    await screenshots(page, "usage-month")
    await page.select_option("#u-group", "user")
    await page.locator(".report-form button[type=submit]").click()
    await page.wait_for_url(lambda url: "groupBy=user" in url)

    # "Last week": Monday to Monday in the workspace's zone, shown through its Sunday.
    href = await page.locator(".presets a", has_text="Last week").get_attribute("href")
    assert href is not None
    query = parse_qs(urlsplit(href).query)
    monday = today - timedelta(days=today.weekday())
    assert query["from"] == [(monday - timedelta(days=7)).isoformat()]
    assert query["through"] == [(monday - timedelta(days=1)).isoformat()]
    await page.locator(".presets a", has_text="Last week").click()
    await page.wait_for_url(lambda url: "through=" in url)
    assert await page.locator("#u-from").input_value() == query["from"][0]

    # The CSV is named by the first and the last day it includes.
    first, last = date(2026, 11, 23), date(2026, 11, 29)
    csv = await page.request.get(
        f"{demo.url}/w/{demo.slug}/usage.csv?from={first}&to={last + timedelta(days=1)}"
    )
    assert csv.status == 200
    disposition = csv.headers["content-disposition"]
    assert disposition == 'attachment; filename="usage-2026-11-23_2026-11-29.csv"'
    bad = await page.request.get(f"{demo.url}/w/{demo.slug}/usage.csv?from=soon&to=later")
    assert bad.status == 422
    assert isinstance((await bad.json())["detail"], str)
