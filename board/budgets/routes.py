"""PUT …/budgets/{team}, GET …/budgets and GET …/reports/budgets (docs/budgets.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from board.auth.deps import AdminDep, ReaderDep
from board.budgets import service
from board.budgets.periods import parse_period
from board.budgets.report import budget_report, report_csv
from board.budgets.schemas import BudgetIn, BudgetOut, BudgetReportOut, BudgetsOut
from board.db.deps import SessionDep
from board.pricing.currencies import MINOR_UNITS
from board.reportkit import params
from board.reportkit.slots import report_slot

router = APIRouter(prefix="/api/v1/workspaces/{slug}", tags=["budgets"])

Text = Annotated[str | None, Query(max_length=40)]
CSV_ALTERNATIVE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}},
    429: {"description": "The workspace's reports are all running; see Retry-After."},
}


@router.get("/budgets", response_model=BudgetsOut, summary="Every team's dated budgets")
async def budgets(ctx: ReaderDep, session: SessionDep) -> BudgetsOut:
    return await service.list_budgets(session, ctx.workspace_id)


# The team is the last segment and may hold "/" (a team name is the admins' free text).
@router.put("/budgets/{team:path}", response_model=BudgetOut, summary="Set a team's budget")
async def put_budget(team: str, body: BudgetIn, ctx: AdminDep, session: SessionDep) -> BudgetOut:
    """A team's budget per month or quarter from the period holding `from` on (the whole
    of that period); neither figure ends the team's budget from then."""
    return await service.put_budget(session, ctx, team, body)


@router.get(
    "/reports/budgets",
    response_model=BudgetReportOut,
    responses=CSV_ALTERNATIVE,
    summary="Each team's budget, use and forecast for a month or quarter",
)
async def budgets_report(
    ctx: ReaderDep,
    request: Request,
    period: Text = None,
    fmt: Annotated[str | None, Query(alias="format", max_length=10)] = None,
) -> Response:
    """`period`: a month (2026-12) or a quarter (2026-Q4) in the workspace's zone; the
    month of today when absent."""
    zone = ctx.workspace.timezone
    now = datetime.now(UTC)
    chosen = parse_period(period, params.day_now(params.parse_zone(zone)[1], now))
    chosen_format = params.parse_choice("format", fmt, params.FORMATS, "json")
    # Two usage reports (the period and the pace): one of the workspace's report slots.
    async with report_slot(request, ctx.workspace_id) as conn:
        report = await budget_report(conn, ctx.workspace_id, zone, chosen, now)
    if chosen_format == "json":
        return Response(report.model_dump_json(), media_type="application/json")
    digits = MINOR_UNITS.get(report.currency or "", 2)
    filename = f"{ctx.workspace.slug}-budgets-{report.period}.csv"
    return Response(
        report_csv(report, digits),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
