"""GET …/reports/usage and …/reports/utilization (board-api.md), JSON or CSV, streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Annotated, Any

import psycopg
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from board.auth.deps import ReaderDep, WorkspaceContext
from board.reportkit import params
from board.reportkit.slots import keeper_connect, take_report_connection
from board.reportkit.streaming import Part, ReportStreamResponse, accepts_gzip
from board.reports import bodies, groupings, stream, utilization_stream
from board.reports.schemas import UsageReportOut, UtilizationReportOut

router = APIRouter(prefix="/api/v1/workspaces/{slug}/reports", tags=["reports"])

# Parsed by board.reportkit.params and board.reports.groupings, so every bad value gets
# a sentence saying why.
Text = Annotated[str | None, Query()]
# The body is streamed as bytes (board.reports.stream), so FastAPI does not serialize it:
# the models document it for /docs, and `format=csv` sends text/csv instead.
CSV_ALTERNATIVE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}},
    429: {"description": "The workspace's reports are all running; see Retry-After."},
}


async def _respond(
    request: Request,
    ctx: WorkspaceContext,
    name: str,
    window: params.Window,
    fmt: str,
    conn: psycopg.AsyncConnection[Any],
    prepared: Awaitable[AsyncIterator[Part]],
) -> Response:
    """The streamed answer; the report's connection (and its slot) lives as long as it."""
    try:
        chunks = await prepared
    except BaseException:
        await conn.close()
        raise
    gzip = accepts_gzip(request.headers)
    if fmt == "json":
        return ReportStreamResponse(conn, chunks, media_type="application/json", gzip=gzip)
    start = window.local(window.start).date().isoformat()
    end = window.local(window.end).date().isoformat()
    disposition = f'attachment; filename="{ctx.workspace.slug}-{name}-{start}-{end}.csv"'
    return ReportStreamResponse(
        conn,
        chunks,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": disposition},
        gzip=gzip,
    )


@router.get(
    "/usage",
    response_model=UsageReportOut,
    responses=CSV_ALTERNATIVE,
    summary="GPU-hours held, by person, team, host, GPU or day",
)
async def usage(
    ctx: ReaderDep,
    request: Request,
    from_: Annotated[str, Query(alias=params.FROM, min_length=1, description=params.BOUND_HELP)],
    to: Annotated[str, Query(alias=params.TO, min_length=1, description=params.BOUND_HELP)],
    group_by: Annotated[str | None, Query(alias="groupBy")] = None,
    tz: Text = None,
    fmt: Annotated[str | None, Query(alias="format")] = None,
) -> Response:
    window = params.parse_window(from_, to, tz)
    keys = groupings.parse_usage_group(group_by)
    chosen_format = params.parse_choice("format", fmt, params.FORMATS, "json")
    conn = await take_report_connection(request, ctx.workspace_id)
    prepared = stream.prepare_usage(conn, ctx.workspace_id, window, keys, chosen_format)
    return await _respond(request, ctx, "usage", window, chosen_format, conn, prepared)


@router.get(
    "/utilization",
    response_model=UtilizationReportOut,
    responses=CSV_ALTERNATIVE,
    summary="Utilization by host or GPU, per hour or day",
)
async def utilization(
    ctx: ReaderDep,
    request: Request,
    from_: Annotated[str, Query(alias=params.FROM, min_length=1, description=params.BOUND_HELP)],
    to: Annotated[str, Query(alias=params.TO, min_length=1, description=params.BOUND_HELP)],
    group_by: Annotated[str | None, Query(alias="groupBy")] = None,
    bucket: Text = None,
    tz: Text = None,
    fmt: Annotated[str | None, Query(alias="format")] = None,
) -> Response:
    window = params.parse_window(from_, to, tz)
    group = params.parse_choice("groupBy", group_by, groupings.UTILIZATION_GROUPS, "host")
    chosen = params.parse_choice("bucket", bucket, groupings.BUCKETS, "day")
    chosen_format = params.parse_choice("format", fmt, params.FORMATS, "json")
    conn = await take_report_connection(request, ctx.workspace_id)

    async def prepared() -> AsyncIterator[Part]:
        own = (params.DEFAULT_ZONE, ctx.workspace.timezone)
        keeps = await bodies.may_keep(conn, ctx.workspace_id, window.tz_name, own)
        return await utilization_stream.prepare_utilization(
            conn,
            ctx.workspace_id,
            window,
            group,
            chosen,
            chosen_format,
            keeper_connect(request) if keeps else None,
        )

    return await _respond(request, ctx, "utilization", window, chosen_format, conn, prepared())
