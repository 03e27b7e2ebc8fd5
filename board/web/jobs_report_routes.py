"""The jobs page: the scheduler's jobs of a window, the most wasteful first, and the
account (team) view (docs/ui.md). The jobs report service, as the REST report calls it
(board.jobs.report); a job links to its own page, built from its public id."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response

from board.errors import DomainError, Unprocessable
from board.jobs.report import GROUPS, ROW_LIMIT, JobsReport, jobs_report, parse_query
from board.reportkit import params
from board.reportkit.slots import report_slot
from board.web.deps import Page, PageDep
from board.web.render import PageRoute, error_page, render

router = APIRouter(prefix="/w/{slug}", route_class=PageRoute, include_in_schema=False)

LABELS = {
    "job": "Job",
    "user": "User",
    "account": "Account (team)",
    "partition": "Partition",
    "day": "Day",
}
DEFAULT_DAYS = 7
# Rows a page shows: the most wasteful first; the totals cover every row.
PAGE_ROWS = 200
Text = Annotated[str, Query(max_length=100)]


def _today(zone_name: str) -> date:
    try:
        _, zone = params.parse_zone(zone_name)
    except DomainError:
        _, zone = params.parse_zone("UTC")  # the report says why the zone is wrong
    return params.day_now(zone)


def _window(page: Page, from_: str, through: str, tz: str) -> tuple[params.Window, str, str]:
    """The form's days (Through inclusive) as the report's window; 422 says why."""
    tz = tz or page.ctx.workspace.timezone
    today = _today(tz)
    first = from_ or (today - timedelta(days=DEFAULT_DAYS - 1)).isoformat()
    last = through or today.isoformat()
    try:
        to = (date.fromisoformat(last) + timedelta(days=1)).isoformat()
    except ValueError:
        refusal = f"Through {last[:40]!r} is not a date; write it as YYYY-MM-DD."
        raise Unprocessable(refusal) from None
    except OverflowError:
        raise Unprocessable(f"Through {last} is the calendar's last day.") from None
    return params.parse_window(first, to, tz), first, last


def team_totals(report: JobsReport) -> list[dict[str, Any]]:
    """Account rows summed per team (accounts without one last), the most wasted first."""
    per: dict[str | None, dict[str, Any]] = defaultdict(
        lambda: {"accounts": 0, "allocated": 0.0, "wasted": 0.0}
    )
    for row in report.rows:
        found = per[row["team"]]
        found["accounts"] += 1
        found["allocated"] += row["allocatedGpuHours"]
        found["wasted"] += row["wastedGpuHours"]
    rows = [{"team": team, **figures} for team, figures in per.items()]
    rows.sort(key=lambda r: (r["team"] is None, -r["wasted"], r["team"] or ""))
    for row in rows:
        row["allocated"] = round(row["allocated"], 6)
        row["wasted"] = round(row["wasted"], 6)
        row["share"] = row["wasted"] / row["allocated"] if row["allocated"] else None
    return rows


@router.get("/jobs")
async def jobs_page(
    request: Request,
    page: PageDep,
    from_: Annotated[str, Query(alias="from", max_length=40)] = "",
    through: Text = "",
    group_by: Annotated[str, Query(alias="groupBy", max_length=20)] = "",
    tz: Text = "",
    user: Text = "",
    # A record's account may have 200 characters (board.jobs.schemas), so may its filter.
    account: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    context: dict[str, Any] = {
        "page": page,
        "nav": "jobs",
        "labels": LABELS,
        "groups": GROUPS,
        "form": {
            "from": from_,
            "through": through,
            "groupBy": group_by or "job",
            "tz": tz or page.ctx.workspace.timezone,
            "user": user,
            "account": account,
        },
        "error": None,
        "report": None,
        "teams": [],
        "page_rows": PAGE_ROWS,
    }
    try:
        window, first, last = _window(page, from_, through, tz)
        context["form"].update({"from": first, "through": last})
        # Waste first for every grouping: the page is for finding it.
        query = parse_query(window, group_by, "wasted", user, account)
        async with report_slot(request, page.ctx.workspace_id) as conn:
            # Jobs are many (the most wasteful shown); users, accounts, days are few.
            limit = PAGE_ROWS if query.group == "job" else ROW_LIMIT
            report = await jobs_report(conn, page.ctx.workspace_id, query, row_limit=limit)
    except HTTPException as exc:
        response = error_page(request, exc.status_code, str(exc.detail))
        response.headers.update(exc.headers or {})
        return response
    except DomainError as exc:
        if exc.status_code != 422:
            raise
        context["error"] = exc.detail
        return render(request, "jobs_report.html", context, status_code=422)
    context["report"] = report
    if query.group == "account":
        context["teams"] = team_totals(report)
    return render(request, "jobs_report.html", context)
