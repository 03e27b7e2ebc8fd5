"""GET …/reports/jobs (board-api.md; docs/jobs.md "The jobs report"), JSON or CSV."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from board.auth.deps import ReaderDep
from board.jobs.report import jobs_report, parse_query
from board.jobs.report_schemas import JobsReportOut
from board.reportkit import params
from board.reportkit.slots import report_slot

router = APIRouter(prefix="/api/v1/workspaces/{slug}/reports", tags=["reports"])

# Parsed by board.reportkit.params and board.jobs.report, so a bad value gets a sentence.
Text = Annotated[str | None, Query()]
CSV_ALTERNATIVE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}},
    429: {"description": "The workspace's reports are all running; see Retry-After."},
}


@router.get(
    "/jobs",
    response_model=JobsReportOut,
    responses=CSV_ALTERNATIVE,
    summary="Scheduler jobs' allocated GPU-hours and how they were spent",
)
async def jobs(
    ctx: ReaderDep,
    request: Request,
    from_: Annotated[str, Query(alias=params.FROM, min_length=1, description=params.BOUND_HELP)],
    to: Annotated[str, Query(alias=params.TO, min_length=1, description=params.BOUND_HELP)],
    group_by: Annotated[str | None, Query(alias="groupBy")] = None,
    tz: Text = None,
    fmt: Annotated[str | None, Query(alias="format")] = None,
    user: Text = None,
    account: Text = None,
    sort: Text = None,
) -> Response:
    """`groupBy`: job (default), user, account (with its team), partition or day (in
    `tz`). `sort`: wasted (most wasted first; the default per job), allocated, or key
    (the default otherwise). At most `rowLimit` rows; the totals cover them all."""
    window = params.parse_window(from_, to, tz)
    query = parse_query(window, group_by, sort, user, account)
    chosen_format = params.parse_choice("format", fmt, params.FORMATS, "json")
    async with report_slot(request, ctx.workspace_id) as conn:
        report = await jobs_report(conn, ctx.workspace_id, query)
    if chosen_format == "json":
        return Response(report.to_json(), media_type="application/json")
    start = window.local(window.start).date().isoformat()
    end = window.local(window.end).date().isoformat()
    filename = f"{ctx.workspace.slug}-jobs-{start}-{end}.csv"
    return Response(
        report.to_csv(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
