"""GET/PUT …/prices and GET …/reports/focus (board-api.md "Money")."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from board.auth.deps import AdminDep, ReaderDep
from board.db.deps import SessionDep
from board.errors import answers
from board.money import service
from board.money.focus import Account, prepare_focus
from board.money.schemas import PricesIn, PricesOut
from board.reports import params
from board.reports.slots import take_report_connection
from board.reports.streaming import ReportStreamResponse

router = APIRouter(prefix="/api/v1/workspaces/{slug}", tags=["money"])

Text = Annotated[str | None, Query()]
FOCUS_CSV: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}},
    429: {"description": "The workspace's reports are all running; see Retry-After."},
}


@router.get("/prices", response_model=PricesOut, summary="GPU-hour prices")
async def prices(ctx: ReaderDep, session: SessionDep) -> PricesOut:
    return await service.prices(session, ctx)


@router.put(
    "/prices",
    response_model=PricesOut,
    summary="Replace the GPU-hour prices",
    responses=answers(409, meaning={409: "The change would rewrite a price already in force."}),
)
async def put_prices(body: PricesIn, ctx: AdminDep, session: SessionDep) -> PricesOut:
    return await service.put_prices(session, ctx, body)


@router.get(
    "/reports/focus",
    response_class=Response,
    responses=FOCUS_CSV,
    summary="Cost export (FOCUS 1.2 CSV)",
)
async def focus(
    ctx: ReaderDep,
    request: Request,
    from_: Annotated[str, Query(alias=params.FROM, min_length=1, description=params.BOUND_HELP)],
    to: Annotated[str, Query(alias=params.TO, min_length=1, description=params.BOUND_HELP)],
    tz: Text = None,
) -> Response:
    """The window's held GPU-hours and their cost as a FOCUS 1.2 CSV (docs/money.md);
    days are cut in `tz`, the workspace's zone unless given."""
    window = params.parse_window(from_, to, tz or ctx.workspace.timezone)
    account = Account(slug=ctx.workspace.slug, name=ctx.workspace.name)
    conn = await take_report_connection(request, ctx.workspace_id)
    try:
        chunks = await prepare_focus(conn, ctx.workspace_id, account, window)
    except BaseException:
        await conn.close()
        raise
    start = window.local(window.start).date().isoformat()
    end = window.local(window.end).date().isoformat()
    filename = f"{ctx.workspace.slug}-focus-{start}-{end}.csv"
    return ReportStreamResponse(
        conn,
        chunks,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
