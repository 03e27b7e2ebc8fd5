"""GET …/reports/usage and …/reports/utilization (board-api.md), JSON or CSV."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response

from board.auth.deps import ReaderDep, WorkspaceContext
from board.db.connection import report_connection
from board.db.deps import SessionDep
from board.reports import params, rendered, service
from board.reports.csv import render_csv
from board.reports.schemas import UsageHead, UsageReportOut, UtilizationHead, UtilizationReportOut

router = APIRouter(prefix="/api/v1/workspaces/{slug}/reports", tags=["reports"])

# Parsed by board.reports.params, so every bad value gets a sentence saying why.
Text = Annotated[str | None, Query()]
# The body is built (or written by PostgreSQL) as bytes, so FastAPI does not serialize
# it again: the models document it for /docs, and `format=csv` sends text/csv instead.
CSV_ALTERNATIVE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}}
}


def _csv(
    ctx: WorkspaceContext, name: str, head: UsageHead | UtilizationHead, body: str | bytes
) -> Response:
    span = f"{head.from_.date().isoformat()}-{head.to.date().isoformat()}"
    return Response(
        body,
        media_type="text/csv; charset=utf-8",
        headers={
            "Content-Disposition": f'attachment; filename="{ctx.workspace.slug}-{name}-{span}.csv"'
        },
    )


@router.get("/usage", response_model=UsageReportOut, responses=CSV_ALTERNATIVE)
async def usage(
    ctx: ReaderDep,
    session: SessionDep,
    from_: Annotated[str | None, Query(alias="from")] = None,
    to: Text = None,
    group_by: Annotated[str | None, Query(alias="groupBy")] = None,
    tz: Text = None,
    fmt: Annotated[str | None, Query(alias="format")] = None,
) -> Response:
    window = params.parse_window(from_, to, tz)
    keys = params.parse_usage_group(group_by)
    chosen_format = params.parse_choice("format", fmt, params.FORMATS, "json")
    conn = await report_connection(session)
    report = await service.usage_report(conn, ctx.workspace_id, window, keys)
    if chosen_format == "csv":
        return _csv(ctx, "usage", report.head, render_csv(report))
    return Response(report.to_json(), media_type="application/json")


@router.get("/utilization", response_model=UtilizationReportOut, responses=CSV_ALTERNATIVE)
async def utilization(
    ctx: ReaderDep,
    session: SessionDep,
    from_: Annotated[str | None, Query(alias="from")] = None,
    to: Text = None,
    group_by: Annotated[str | None, Query(alias="groupBy")] = None,
    bucket: Text = None,
    tz: Text = None,
    fmt: Annotated[str | None, Query(alias="format")] = None,
) -> Response:
    window = params.parse_window(from_, to, tz)
    group = params.parse_choice("groupBy", group_by, params.UTILIZATION_GROUPS, "host")
    chosen = params.parse_choice("bucket", bucket, params.BUCKETS, "day")
    chosen_format = params.parse_choice("format", fmt, params.FORMATS, "json")
    report = await rendered.utilization(
        await report_connection(session), ctx.workspace_id, window, group, chosen, chosen_format
    )
    if chosen_format == "csv":
        return _csv(ctx, "utilization", report.head, report.body())
    return Response(report.body(), media_type="application/json")
