"""The budgets page: each team's budget, use and forecast for a month or quarter as bars
and figures (every role reads it), and the form where admins set a budget."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, HTTPException, Query, Request, Response
from pydantic import ValidationError

from board.budgets import service as budgets
from board.budgets.periods import parse_period, period_of
from board.budgets.report import budget_amount_text, budget_report, report_csv
from board.budgets.schemas import BudgetIn
from board.db.deps import SessionDep
from board.errors import DomainError, Unprocessable, describe_validation_errors
from board.pricing.currencies import MINOR_UNITS
from board.reportkit.params import day_now, parse_zone
from board.reportkit.slots import report_slot
from board.web.budget_view import STATUS_WORDS, bars
from board.web.deps import AdminPageDep, CsrfDep, Page, PageDep
from board.web.forms import submit
from board.web.render import PageRoute, error_page, finish, redirect, render

router = APIRouter(prefix="/w/{slug}", route_class=PageRoute, include_in_schema=False)

Text = Annotated[str, Query(max_length=40)]


def _today(page: Page) -> date:
    return day_now(parse_zone(page.ctx.workspace.timezone)[1])


def _presets(today: date) -> list[tuple[str, str]]:
    month = period_of(today, "month")
    return [
        ("This month", month.name),
        ("Last month", period_of(month.first - timedelta(days=1), "month").name),
        ("This quarter", period_of(today, "quarter").name),
    ]


async def _page(
    request: Request,
    page: Page,
    db: SessionDep,
    period: str,
    status_code: int = 200,
    error: str | None = None,
    saved: str | None = None,
    form: dict[str, str] | None = None,
) -> Response:
    today = _today(page)
    listed = await budgets.list_budgets(db, page.ctx.workspace_id)
    context: dict[str, Any] = {
        "page": page,
        "nav": "budgets",
        "period": period,
        "presets": _presets(today),
        "report": None,
        "bars": [],
        "status_words": STATUS_WORDS,
        "digits": 2,
        "error": error,
        "saved": saved,
        "budgets": listed,
        "amount_digits": MINOR_UNITS.get(listed.currency or "", 2),
        "amount_text": budget_amount_text,
        "form": form or {"period": "month", "from": period_of(today, "month").first.isoformat()},
        "csv_url": "",
        "api_url": "",
    }
    try:
        chosen = parse_period(period, today)
        async with report_slot(request, page.ctx.workspace_id) as conn:
            report = await budget_report(
                conn, page.ctx.workspace_id, page.ctx.workspace.timezone, chosen, datetime.now(UTC)
            )
    except HTTPException as exc:  # every report slot taken: the reports' 429, as a page
        response = error_page(request, exc.status_code, str(exc.detail))
        response.headers.update(exc.headers or {})
        return response
    except DomainError as exc:
        if exc.status_code != 422:
            raise
        context.update(error=exc.detail)
        return render(request, "budgets.html", context, status_code=422)
    digits = MINOR_UNITS.get(report.currency or "", 2)
    query = urlencode({"period": report.period})
    context.update(
        period=report.period,
        report=report,
        bars=bars(report, digits),
        digits=digits,
        csv_url=f"/w/{page.slug}/budgets.csv?{query}",
        api_url=f"/api/v1/workspaces/{page.slug}/reports/budgets?{query}",
    )
    return render(request, "budgets.html", context, status_code=status_code)


@router.get("/budgets")
async def budgets_page(
    request: Request, page: PageDep, db: SessionDep, period: Text = "", saved: Text = ""
) -> Response:
    return await _page(request, page, db, period, saved=saved or None)


@router.post("/budgets")
async def save_budget(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    team: Annotated[str, Form(max_length=200)] = "",
    kind: Annotated[str, Form(max_length=20)] = "",
    gpu_hours: Annotated[str, Form(max_length=40)] = "",
    amount: Annotated[str, Form(max_length=40)] = "",
    from_: Annotated[str, Form(alias="from", max_length=40)] = "",
    shown: Annotated[str, Form(max_length=40)] = "",
) -> Response:
    """Set a team's budget from the period holding `from` (empty figures end it)."""
    form = {"team": team, "period": kind, "gpu_hours": gpu_hours, "amount": amount, "from": from_}

    async def save() -> Response:
        try:
            body = BudgetIn.model_validate(
                {
                    "period": kind,
                    "gpuHours": gpu_hours.strip() or None,
                    "amount": amount.strip() or None,
                    "from": from_.strip(),
                }
            )
        except ValidationError as exc:
            raise Unprocessable(describe_validation_errors(exc.errors())) from None
        await budgets.put_budget(db, page.ctx, team, body)
        period = period_of(body.from_, body.period).name
        query = urlencode({"period": period, "saved": team[:40]})
        return redirect(request, f"/w/{page.slug}/budgets?{query}#teams")

    async def refused(exc: DomainError) -> Response:
        return await _page(request, page, db, shown, exc.status_code, exc.detail, form=form)

    return await submit(db, page, save, refused)


@router.get("/budgets.csv")
async def budgets_csv(request: Request, page: PageDep, period: Text = "") -> Response:
    """The page's report as CSV: the API's `format=csv`, with the page's sign-in."""
    chosen = parse_period(period, _today(page))
    try:
        async with report_slot(request, page.ctx.workspace_id) as conn:
            report = await budget_report(
                conn, page.ctx.workspace_id, page.ctx.workspace.timezone, chosen, datetime.now(UTC)
            )
    except HTTPException as exc:
        response = error_page(request, exc.status_code, str(exc.detail))
        response.headers.update(exc.headers or {})
        return response
    filename = f"{page.slug}-budgets-{report.period}.csv"
    return finish(
        request,
        Response(
            report_csv(report, MINOR_UNITS.get(report.currency or "", 2)),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{filename}"'},
        ),
    )
