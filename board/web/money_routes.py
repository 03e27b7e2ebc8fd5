"""Team statements: the month per team (a page that prints well), and the same as CSV."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request, Response

from board.db.connection import report_connection
from board.db.deps import SessionDep
from board.errors import DomainError
from board.money import statements
from board.reports.params import parse_zone
from board.web.deps import Page, PageDep
from board.web.render import PageRoute, finish, render

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


async def _figures(db: SessionDep, page: Page, month: str) -> tuple[date, Any, Any]:
    first = statements.parse_month(month, _today(page))
    window = statements.month_window(first, page.ctx.workspace.timezone)
    currency, teams = await statements.month_figures(
        await report_connection(db), page.ctx.workspace_id, window
    )
    return first, currency, teams


def _link(page: Page, month: str, team: str | None, suffix: str = "") -> str:
    query = {"month": month, **({"team": team} if team is not None else {"unassigned": "1"})}
    return f"/w/{page.slug}/statements{suffix}?{urlencode(query)}"


@router.get("/statements")
async def statements_page(
    request: Request,
    page: PageDep,
    db: SessionDep,
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
        "statement": None,
        "links": {},
        "csv_url": "",
    }
    try:
        first, currency, teams = await _figures(db, page, month)
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
        context["links"] = {t: _link(page, shown, t) for t in teams}
    return render(request, "statement.html", context)


@router.get("/statements.csv")
async def statement_csv(
    request: Request,
    page: PageDep,
    db: SessionDep,
    month: Text = "",
    team: Text = "",
    unassigned: Text = "",
) -> Response:
    _, chosen = _chosen(team, unassigned)
    first, currency, teams = await _figures(db, page, month)
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
