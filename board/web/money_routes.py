"""The money pages: team statements (a page that prints well, and the same as CSV), and
the prices page where admins set the currency and the prices."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, HTTPException, Query, Request, Response

from board.db.deps import SessionDep
from board.errors import DomainError
from board.hosts import service as hosts
from board.money import price_edits, statements
from board.money import service as money
from board.money.corrections import CorrectionWindow, PriceWindowDep
from board.money.schemas import price_entry, price_key
from board.pricing.currencies import MINOR_UNITS
from board.reportkit.params import parse_zone
from board.reportkit.slots import report_slot
from board.web.deps import AdminPageDep, CsrfDep, Page, PageDep
from board.web.forms import submit
from board.web.prices_page import prices_view
from board.web.render import PageRoute, error_page, finish, redirect, render

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


# The prices page (admins): the currency, the prices and their correction window.

PRICE_NOTICES = {
    "added": "Price saved. Costs use it from its start.",
    "removed": "Price removed. Its hours are priced by the price before it again.",
    "currency": "Currency saved.",
}


@dataclass(frozen=True)
class PriceForm:
    """What the add form shows again after a refusal."""

    gpu_model: str = ""
    per_gpu_hour: str = ""
    from_: str = ""


async def _prices_page(
    request: Request,
    page: Page,
    db: SessionDep,
    window: CorrectionWindow,
    status_code: int = 200,
    error: str | None = None,
    form: PriceForm | None = None,
) -> Response:
    out = await money.prices(db, page.ctx, window)
    view = prices_view(out, window)
    context: dict[str, Any] = {
        "page": page,
        "nav": "admin",
        "prices": view,
        "models": await hosts.gpu_models(db, page.ctx.workspace_id),
        "currencies": sorted(MINOR_UNITS),
        "notice": PRICE_NOTICES.get(request.query_params.get("notice", "")),
        "error": error,
        "form": form or PriceForm(from_=view.today),
    }
    return render(request, "prices.html", context, status_code=status_code)


def _again(
    request: Request,
    page: Page,
    db: SessionDep,
    window: CorrectionWindow,
    form: PriceForm | None = None,
) -> Callable[[DomainError], Awaitable[Response]]:
    """The prices page drawn again with a form's refusal (`form`: as it was sent)."""

    async def again(exc: DomainError) -> Response:
        return await _prices_page(request, page, db, window, exc.status_code, exc.detail, form)

    return again


@router.get("/admin/prices")
async def prices_page(
    request: Request, page: AdminPageDep, db: SessionDep, window: PriceWindowDep
) -> Response:
    return await _prices_page(request, page, db, window)


@router.post("/admin/prices")
async def save_price(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    window: PriceWindowDep,
    gpu_model: Annotated[str, Form(max_length=1000)] = "",
    per_gpu_hour: Annotated[str, Form(max_length=100)] = "",
    from_: Annotated[str, Form(alias="from", max_length=100)] = "",
) -> Response:
    """Add a price, or correct the amount of the one with that model and date."""
    form = PriceForm(gpu_model, per_gpu_hour, from_)

    async def save() -> Response:
        entry = price_entry(gpu_model.strip(), from_.strip(), per_gpu_hour.strip())
        await price_edits.set_price(db, page.ctx, entry, window)
        return redirect(request, f"/w/{page.slug}/admin/prices?notice=added#history")

    return await submit(db, page, save, _again(request, page, db, window, form))


@router.post("/admin/prices/remove")
async def remove_price(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    window: PriceWindowDep,
    gpu_model: Annotated[str, Form(max_length=1000)] = "",
    from_: Annotated[str, Form(alias="from", max_length=100)] = "",
) -> Response:
    async def remove() -> Response:
        key = price_key(gpu_model, from_)
        await price_edits.remove_price(db, page.ctx, key.gpu_model, key.from_, window)
        return redirect(request, f"/w/{page.slug}/admin/prices?notice=removed#history")

    return await submit(db, page, remove, _again(request, page, db, window))


@router.post("/admin/prices/currency")
async def save_currency(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    window: PriceWindowDep,
    currency: Annotated[str, Form(max_length=100)] = "",
) -> Response:
    async def save() -> Response:
        await price_edits.set_currency(db, page.ctx, currency.strip(), window)
        return redirect(request, f"/w/{page.slug}/admin/prices?notice=currency#currency")

    return await submit(db, page, save, _again(request, page, db, window))
