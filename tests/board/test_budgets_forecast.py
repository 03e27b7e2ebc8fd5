"""The forecast at the period's end: used + the last 7 days' pace × the days left, on the
report's own clock (asOf), for a month and a quarter, and what it makes the status."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from board.budgets.periods import parse_period
from board.budgets.report import budget_report
from board.db.urls import libpq_url
from tests.board.budget_builders import (
    HOUR_US,
    budgets_report,
    by_team,
    put_budget,
    seed_hours,
    set_team,
)
from tests.board.test_reports_builders import quick_tenant, workspace_id

# Vision holds half a GPU every hour of November 1-14 (12 GPU-hours a day); nlp holds a
# whole GPU on November 1-7 only (24 a day), and nothing in the last week.
NOV = datetime(2026, 11, 1, tzinfo=UTC)


def _held() -> dict[tuple[str, datetime], int]:
    held = {("alice", NOV + timedelta(hours=i)): HOUR_US // 2 for i in range(14 * 24)}
    held |= {("bob", NOV + timedelta(hours=i)): HOUR_US for i in range(7 * 24)}
    return held


async def _fixture(app: Any, client: httpx.AsyncClient) -> Any:
    tenant = await quick_tenant(app, "fc")
    await set_team(client, tenant, "alice", "vision")
    await set_team(client, tenant, "bob", "nlp")
    await seed_hours(app, client, tenant, _held())
    return tenant


async def _report(app: Any, slug: str, period: str, now: datetime) -> Any:
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url) as conn:
        ws = await workspace_id(conn, slug)
        return await budget_report(conn, ws, "UTC", parse_period(period, date(2026, 11, 1)), now)


async def test_the_forecast_is_used_plus_the_last_weeks_pace_times_the_days_left(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await _fixture(app, client)
    await put_budget(
        client, tenant, "vision", period="month", gpuHours=400, **{"from": "2026-11-01"}
    )
    await put_budget(client, tenant, "nlp", period="month", gpuHours=200, **{"from": "2026-11-01"})
    now = datetime(2026, 11, 15, tzinfo=UTC)
    found = await _report(app, tenant.slug, "2026-11", now)
    assert found.as_of == now
    assert (found.pace_from, found.pace_to) == (now - timedelta(days=7), now)
    assert found.remaining_days == 16
    assert "7 days" in found.forecast_rule
    rows = {r.team: r for r in found.rows}
    vision = rows["vision"]
    assert (vision.used_gpu_hours, vision.pace_gpu_hours_per_day) == (168.0, 12.0)
    assert vision.forecast_gpu_hours == 168 + 12 * 16 == 360
    assert (vision.used_share, vision.forecast_share) == (0.42, 0.9)
    assert vision.status == "warning"  # not used up, but on course past 80 %
    nlp = rows["nlp"]
    # 168 used in the first week, nothing in the last: the pace is 0, so is the rest.
    assert (nlp.used_gpu_hours, nlp.pace_gpu_hours_per_day) == (168.0, 0.0)
    assert (nlp.forecast_gpu_hours, nlp.used_share, nlp.status) == (168.0, 0.84, "warning")

    # Half past the hour: the pace's week ends at the hour begun, the days left count
    # from now itself.
    later = await _report(app, tenant.slug, "2026-11", now + timedelta(minutes=30))
    assert later.pace_to == now
    assert later.remaining_days == pytest.approx(16 - 1 / 48, abs=1e-6)

    # The quarter: the same pace over the 47 days left of it.
    quarter = await _report(app, tenant.slug, "2026-Q4", now)
    assert quarter.remaining_days == 47
    q_vision = {r.team: r for r in quarter.rows}["vision"]
    assert q_vision.forecast_gpu_hours == 168 + 12 * 47
    assert q_vision.budget_gpu_hours is None
    assert q_vision.status == "none"


async def test_a_period_over_or_ahead(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await _fixture(app, client)
    # Over: nothing left, the pace is the period's own last week, the forecast the use.
    over = await _report(app, tenant.slug, "2026-11", datetime(2026, 12, 20, tzinfo=UTC))
    assert over.remaining_days == 0
    assert (over.pace_from, over.pace_to) == (
        datetime(2026, 11, 24, tzinfo=UTC),
        datetime(2026, 12, 1, tzinfo=UTC),
    )
    vision = {r.team: r for r in over.rows}["vision"]
    assert vision.forecast_gpu_hours == vision.used_gpu_hours == 168.0
    assert vision.pace_gpu_hours_per_day == 0.0
    # Ahead: nothing used yet, the whole period at today's pace.
    ahead = await _report(app, tenant.slug, "2026-12", datetime(2026, 11, 15, tzinfo=UTC))
    assert ahead.remaining_days == 31
    vision = {r.team: r for r in ahead.rows}["vision"]
    assert (vision.used_gpu_hours, vision.forecast_gpu_hours) == (0.0, 12.0 * 31)


async def test_the_api_report_runs_on_the_current_clock(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await _fixture(app, client)
    before = datetime.now(UTC)
    found = await budgets_report(client, tenant, "")
    after = datetime.now(UTC)
    # The month of today (in the workspace's zone, UTC here), asOf the request's now.
    assert found["period"] in {f"{t.year:04d}-{t.month:02d}" for t in (before, after)}
    assert found["periodKind"] == "month"
    assert found["paceDays"] == 7
    assert before <= datetime.fromisoformat(found["asOf"]) <= after
    assert set(by_team(found)) >= {"vision", "nlp"}
