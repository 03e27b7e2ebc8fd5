"""The usage page and its CSV: the usage report service, exactly as the REST report calls it."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

import psycopg
from fastapi import APIRouter, HTTPException, Query, Request, Response

from board.errors import DomainError, Unprocessable
from board.pricing.currencies import MINOR_UNITS
from board.reportkit import params
from board.reportkit.csv import render_csv
from board.reportkit.slots import report_slot
from board.reports import groupings, service
from board.web.budget_view import this_months_shares
from board.web.charts import DayChart, day_columns, stacked_bars
from board.web.deps import Page, PageDep
from board.web.energy_chart import EnergyDays, energy_days
from board.web.render import PageRoute, error_page, finish, render

router = APIRouter(prefix="/w/{slug}", route_class=PageRoute, include_in_schema=False)

GROUPS = {
    "user": "User",
    "team": "Team",
    "host": "Host",
    "gpu": "GPU",
    "day": "Day",
    "month": "Month",
}
DEFAULT_DAYS = 7


def _today(tz_name: str) -> date:
    try:
        _, zone = params.parse_zone(tz_name)
    except DomainError:
        _, zone = params.parse_zone("UTC")  # the report itself says why the zone is wrong
    return params.day_now(zone)


def _query(page: Page, from_: str, to: str, through: str, group_by: str, tz: str) -> dict[str, str]:
    """The report's parameters in the REST API's terms; the form's `through` is inclusive."""
    tz = tz or page.ctx.workspace.timezone
    today = _today(tz)
    if not to and through:
        try:
            to = (date.fromisoformat(through) + timedelta(days=1)).isoformat()
        except ValueError:
            to = through  # the report's parser says why it is wrong
        except OverflowError:
            # 9999-12-31: the calendar has no day after it (was a 500).
            raise Unprocessable(f"Through {through} is the calendar's last day.") from None
    return {
        "from": from_ or (today - timedelta(days=DEFAULT_DAYS - 1)).isoformat(),
        "to": to or (today + timedelta(days=1)).isoformat(),
        "groupBy": group_by or "user",
        "tz": tz,
    }


def _parsed(query: dict[str, str]) -> tuple[params.Window, tuple[str, ...]]:
    """The report's window and keys (the REST report's terms: in a zone not whole hours
    from UTC a day is the UTC hours that start on it); bad input is a 422 here, before a
    slot is sought."""
    window = params.parse_window(query["from"], query["to"], query["tz"])
    return window, groupings.parse_usage_group(query["groupBy"])


async def _report(
    conn: psycopg.AsyncConnection[Any], page: Page, query: dict[str, str]
) -> service.UsageReport:
    window, keys = _parsed(query)
    return await service.usage_report(conn, page.ctx.workspace_id, window, keys)


def _busy(request: Request, exc: HTTPException) -> Response:
    """Every report slot of the workspace is taken: the reports' 429, as a page."""
    response = error_page(request, exc.status_code, str(exc.detail))
    response.headers.update(exc.headers or {})
    return response


async def _days(
    conn: psycopg.AsyncConnection[Any],
    page: Page,
    query: dict[str, str],
    report: service.UsageReport,
    keys: list[str],
) -> tuple[DayChart | None, EnergyDays | None]:
    """GPU-hours per day, active and idle-held, and kWh per day (board.web.energy_chart):
    the same report per day (from the rollups), or this one when it is already per day."""
    daily = report if keys == ["day"] else await _report(conn, page, {**query, "groupBy": "day"})
    if not daily.rows:
        return None, None
    found = {
        str(r["day"]): (r["activeGpuHours"] or 0.0, r["idleHeldGpuHours"] or 0.0)
        for r in daily.rows
    }
    # Every day of the window, the empty ones too (at most the report's 400 days).
    window = _window_of(report)
    day, last = window.day_of(window.start), window.last_day()
    columns: list[tuple[str, float, float]] = []
    while day <= last:
        columns.append((day.isoformat(), *found.get(day.isoformat(), (0.0, 0.0))))
        day += timedelta(days=1)
    first, last = window.day_of(window.start), window.last_day()
    return day_columns(columns), energy_days(daily.rows, first, last)


def _window_of(report: service.UsageReport) -> params.Window:
    """The window the report read, with its zone (its days are the report's days)."""
    tz_name, zone = params.parse_zone(report.head.tz)
    return params.Window(report.head.from_, report.head.to, tz_name, zone)


def _is_time(value: str) -> bool:
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def _form_refusal(from_: str, through: str) -> str | None:
    """The form's days checked in its own words: the report's sentence speaks of `to`
    (the day after Through) as UTC instants and a [from, to) window the form never shows."""
    days: dict[str, date] = {}
    for label, value in (("From", from_), ("Through", through)):
        if not value:
            continue
        try:
            days[label] = date.fromisoformat(value)
        except ValueError:
            if label == "From" and _is_time(value):
                continue  # a link's exact time: the report checks it
            return f"{label} {value[:40]!r} is not a date; write it as YYYY-MM-DD."
    if len(days) == 2 and days["Through"] < days["From"]:
        return "Through must be on or after From."
    return None


def _through(to: str) -> str:
    """The form shows the last day included; the report's `to` is the day after."""
    try:
        return (date.fromisoformat(to) - timedelta(days=1)).isoformat()
    except (ValueError, OverflowError):  # 0001-01-01 has no day before it (was a 500)
        return to


def _label(row: dict[str, Any], keys: list[str]) -> str:
    parts: list[str] = []
    for key in keys:
        if key == "user":
            parts.append(str(row["user"]))
        elif key == "team":
            parts.append("No team" if row["team"] is None else str(row["team"]))
        elif key == "host":
            parts.append(str(row["displayName"]))
        elif key == "gpu":
            parts.append(f"{row['displayName']} GPU {row['gpuIndex']}")
        elif key == "month":
            parts.append(str(row["month"]))
        else:
            parts.append(str(row["day"]))
    return " · ".join(parts)


def _presets(today: date) -> list[tuple[str, str, str]]:
    first = today.replace(day=1)
    last_month_end = first - timedelta(days=1)
    monday = today - timedelta(days=today.weekday())
    return [
        ("Today", today.isoformat(), today.isoformat()),
        ("Last 7 days", (today - timedelta(days=6)).isoformat(), today.isoformat()),
        # Monday to Monday in the report's zone: the last whole week, through its Sunday.
        (
            "Last week",
            (monday - timedelta(days=7)).isoformat(),
            (monday - timedelta(days=1)).isoformat(),
        ),
        ("This month", first.isoformat(), today.isoformat()),
        ("Last month", last_month_end.replace(day=1).isoformat(), last_month_end.isoformat()),
    ]


@router.get("/usage")
async def usage_page(
    request: Request,
    page: PageDep,
    from_: Annotated[str, Query(alias="from")] = "",
    to: str = "",
    through: str = "",
    group_by: Annotated[str, Query(alias="groupBy")] = "",
    tz: str = "",
) -> Response:
    query = _query(page, from_, to, through, group_by, tz)
    keys = query["groupBy"].split(",")
    # Every name the template reads is set, with or without a report.
    context: dict[str, Any] = {
        "page": page,
        "nav": "usage",
        "query": query,
        "groups": GROUPS,
        "through": _through(query["to"]),
        "presets": _presets(_today(query["tz"])),
        "error": None,
        "report": None,
        "keys": keys,
        "labels": [],
        "bars": [],
        "rows": [],
        "days": None,
        "energy": None,
        "csv_url": f"/w/{page.slug}/usage.csv?{urlencode(query)}",
        # Digits of the currency's minor unit, for the cost column.
        "cost_digits": 2,
        # Per team: each budgeted team's share of this month's budget (the budgets page).
        "budget_shares": [],
        "api_url": (f"/api/v1/workspaces/{page.slug}/reports/usage?{urlencode(query)}&format=csv"),
    }
    refused = _form_refusal(from_, through) if not to else None
    if refused is not None:
        context["error"] = refused
        return render(request, "usage.html", context, status_code=422)
    try:
        # The keys as the report reads them ("user " is user): the rows carry those names.
        keys = list(_parsed(query)[1])
        # A year of rollups, twice: it holds one of the workspace's report slots, as the
        # REST report does (all taken: the 429 with Retry-After, as a page).
        async with report_slot(request, page.ctx.workspace_id) as conn:
            report = await _report(conn, page, query)
            days, energy = await _days(conn, page, query, report, keys)
            if keys == ["team"]:
                zone = page.ctx.workspace.timezone
                context["budget_shares"] = await this_months_shares(
                    conn, page.ctx.workspace_id, zone
                )
    except HTTPException as exc:
        return _busy(request, exc)
    except DomainError as exc:
        if exc.status_code != 422:
            raise
        context["error"] = exc.detail
        return render(request, "usage.html", context, status_code=422)
    # Largest idle-held GPU-hours first (the table's default order; its headers re-sort).
    rows = sorted(report.rows, key=lambda r: -(r["idleHeldGpuHours"] or 0.0))
    labels = [_label(r, keys) for r in rows]
    context.update(
        keys=keys,
        report=report,
        rows=rows,
        cost_digits=MINOR_UNITS.get(report.totals.currency or "", 2),
        labels=labels,
        bars=stacked_bars(
            [
                (label, r["activeGpuHours"], r["idleHeldGpuHours"], r["idleHeldShare"])
                for label, r in zip(labels, rows, strict=True)
            ]
        ),
        days=days,
        energy=energy,
    )
    return render(request, "usage.html", context)


@router.get("/usage.csv")
async def usage_csv(
    request: Request,
    page: PageDep,
    from_: Annotated[str, Query(alias="from")] = "",
    to: str = "",
    group_by: Annotated[str, Query(alias="groupBy")] = "",
    tz: str = "",
) -> Response:
    query = _query(page, from_, to, "", group_by, tz)
    _parsed(query)
    try:
        async with report_slot(request, page.ctx.workspace_id) as conn:
            report = await _report(conn, page, query)
    except HTTPException as exc:
        return _busy(request, exc)
    # Named by the first and the last day it includes, in the report's zone.
    window = _window_of(report)
    first, last = window.day_of(window.start), window.last_day()
    filename = f"usage-{first.isoformat()}_{last.isoformat()}.csv"
    return finish(
        request,
        Response(
            render_csv(report, MINOR_UNITS.get(report.totals.currency or "", 2)),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{filename}"'},
        ),
    )
