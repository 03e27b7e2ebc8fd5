"""Team statements: the month per team (a page that prints well), and the same as CSV."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Query, Request, Response

from board.errors import DomainError
from board.money import statements
from board.reports.params import parse_zone
from board.reports.slots import report_slot
from board.web.deps import Page, PageDep
from board.web.render import PageRoute, error_page, finish, render

router = APIRouter(prefix="/w/{slug}", route_class=PageRoute, include_in_schema=False)

Text = Annotated[str, Query(max_length=120)]


def _today(page: Page) -> date:
    _, zone = parse_zone(page.ctx.workspace.timezone)
    return datetime.now(zone).date()


def _chosen(team: str, unassigned: str) -> tuple[bool, str | None]:
    """(a team was asked for, which one: None is the users without a team)."""
    if unassigned == "1":
        return True, None
    return (True, team) if team else (False, None)


async def _figures(request: Request, page: Page, month: str) -> tuple[date, Any, Any]:
    first = statements.parse_month(month, _today(page))
    window = statements.month_window(first, page.ctx.workspace.timezone)
    # A month of every team's cost is a heavy report: it holds one of the workspace's
    # report slots, as the usage report does (all taken: 429 with Retry-After).
    async with report_slot(request, page.ctx.workspace_id) as conn:
        currency, teams = await statements.month_figures(conn, page.ctx.workspace_id, window)
    return first, currency, teams


def _busy(request: Request, exc: HTTPException) -> Response:
    """Every report slot of the workspace is taken: the reports' 429, as a page."""
    response = error_page(request, exc.status_code, str(exc.detail))
    response.headers.update(exc.headers or {})
    return response


def _link(page: Page, month: str, team: str | None, suffix: str = "") -> str:
    query = {"month": month, **({"team": team} if team is not None else {"unassigned": "1"})}
    return f"/w/{page.slug}/statements{suffix}?{urlencode(query)}"


@router.get("/statements")
async def statements_page(
    request: Request,
    page: PageDep,
    month: Text = "",
    team: Text = "",
    unassigned: Text = "",
) -> Response:
    asked, chosen = _chosen(team, unassigned)
    context: dict[str, Any] = {
        "page": page,
        "nav": "usage",
        "month": month,
        "error": None,
        "overview": [],
        "total": None,
        "statement": None,
        "links": {},
        "csv_url": "",
    }
    try:
        first, currency, teams = await _figures(request, page, month)
    except HTTPException as exc:
        return _busy(request, exc)
    except DomainError as exc:
        if exc.status_code != 422:
            raise
        context["error"] = exc.detail
        return render(request, "statement.html", context, status_code=422)
    shown = first.strftime("%Y-%m")
    context["month"] = shown
    context["currency"] = currency.code if currency else None
    if asked:
        found = statements.statement(
            page.ctx.workspace.name, first, page.ctx.workspace.timezone, chosen, teams, currency
        )
        context["statement"] = found
        context["csv_url"] = _link(page, shown, chosen, ".csv")
    else:
        context["overview"] = statements.overview(teams, currency)
        context["total"] = statements.overview_total(teams, currency)
        context["links"] = {t: _link(page, shown, t) for t in teams}
    return render(request, "statement.html", context)


@router.get("/statements.csv")
async def statement_csv(
    request: Request,
    page: PageDep,
    month: Text = "",
    team: Text = "",
    unassigned: Text = "",
) -> Response:
    _, chosen = _chosen(team, unassigned)
    try:
        first, currency, teams = await _figures(request, page, month)
    except HTTPException as exc:
        return _busy(request, exc)
    found = statements.statement(
        page.ctx.workspace.name, first, page.ctx.workspace.timezone, chosen, teams, currency
    )
    # The team name is the admin's free text: it stays out of the header.
    filename = f"{page.slug}-statement-{found.month}.csv"
    return finish(
        request,
        Response(
            statements.statement_csv(found),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{filename}"'},
        ),
    )
