"""GET …/reports/usage and …/reports/utilization (board-api.md), JSON or CSV."""

from __future__ import annotations

from typing import Annotated, Any

import psycopg
from fastapi import APIRouter, Query
from fastapi.responses import Response
from sqlalchemy.ext.asyncio import AsyncSession

from board.auth.deps import WorkspaceContext, WorkspaceDep
from board.reports import params, rendered, service
from board.reports.csv import render_csv
from board.runtime import SessionDep

router = APIRouter(prefix="/api/v1/workspaces/{slug}/reports", tags=["reports"])

READERS = ("admin", "member", "finance")
# Parsed by board.reports.params, so every bad value gets a sentence saying why.
Text = Annotated[str | None, Query()]


async def _connection(session: AsyncSession) -> psycopg.AsyncConnection[Any]:
    """The request's own connection and transaction, as psycopg for the report SQL."""
    conn = await session.connection()
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert isinstance(driver, psycopg.AsyncConnection)
    return driver


def _csv(ctx: WorkspaceContext, name: str, head: dict[str, Any], body: str | bytes) -> Response:
    filename = f"{ctx.workspace.slug}-{name}-{head['from'][:10]}-{head['to'][:10]}.csv"
    return Response(
        body,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.get("/usage")
async def usage(
    ctx: WorkspaceDep,
    session: SessionDep,
    from_: Annotated[str | None, Query(alias="from")] = None,
    to: Text = None,
    group_by: Annotated[str | None, Query(alias="groupBy")] = None,
    tz: Text = None,
    fmt: Annotated[str | None, Query(alias="format")] = None,
) -> Response:
    ctx.require(*READERS)
    window = params.parse_window(from_, to, tz)
    keys = params.parse_usage_group(group_by)
    chosen_format = params.parse_choice("format", fmt, params.FORMATS, "json")
    report = await service.usage_report(await _connection(session), ctx.workspace_id, window, keys)
    if chosen_format == "csv":
        return _csv(ctx, "usage", report.head, render_csv(report))
    return Response(report.to_json(), media_type="application/json")


@router.get("/utilization")
async def utilization(
    ctx: WorkspaceDep,
    session: SessionDep,
    from_: Annotated[str | None, Query(alias="from")] = None,
    to: Text = None,
    group_by: Annotated[str | None, Query(alias="groupBy")] = None,
    bucket: Text = None,
    tz: Text = None,
    fmt: Annotated[str | None, Query(alias="format")] = None,
) -> Response:
    ctx.require(*READERS)
    window = params.parse_window(from_, to, tz)
    group = params.parse_choice("groupBy", group_by, params.UTILIZATION_GROUPS, "host")
    chosen = params.parse_choice("bucket", bucket, params.BUCKETS, "day")
    chosen_format = params.parse_choice("format", fmt, params.FORMATS, "json")
    report = await rendered.utilization(
        await _connection(session), ctx.workspace_id, window, group, chosen, chosen_format
    )
    if chosen_format == "csv":
        return _csv(ctx, "utilization", report.head, report.body())
    return Response(report.body(), media_type="application/json")
