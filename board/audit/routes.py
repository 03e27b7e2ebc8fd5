"""GET /api/v1/workspaces/{slug}/audit-log (admins): newest first, by time range and cursor."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from board.audit import service
from board.audit.schemas import AuditLogPage
from board.auth.deps import AdminDep
from board.db.deps import SessionDep
from board.errors import Unprocessable

router = APIRouter(prefix="/api/v1/workspaces/{slug}", tags=["audit"])

MAX_LIMIT = 500


def audit_query(
    since: datetime | None, until: datetime | None, limit: int, cursor: str | None
) -> service.AuditQuery:
    """The query's bounds, checked; a bad one is a 422 with a sentence."""
    if since is not None and since.tzinfo is None:
        raise Unprocessable("'from' must be a time with a UTC offset, e.g. 2026-12-01T00:00Z.")
    if until is not None and until.tzinfo is None:
        raise Unprocessable("'to' must be a time with a UTC offset, e.g. 2026-12-02T00:00Z.")
    if since is not None and until is not None and until <= since:
        raise Unprocessable("'to' must be after 'from'.")
    before_id = None
    if cursor is not None:
        before_id = service.parse_cursor(cursor)
        if before_id is None:
            raise Unprocessable("'cursor' must be the nextCursor of a previous page.")
    return service.AuditQuery(since=since, until=until, limit=limit, before_id=before_id)


@router.get("/audit-log", response_model=AuditLogPage)
async def audit_log(
    ctx: AdminDep,
    session: SessionDep,
    since: Annotated[datetime | None, Query(alias="from")] = None,
    until: Annotated[datetime | None, Query(alias="to")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    cursor: Annotated[str | None, Query(max_length=32)] = None,
) -> AuditLogPage:
    """Every admin action and sign-in in the workspace; never a token or a password."""
    query = audit_query(since, until, limit, cursor)
    events, next_cursor = await service.list_events(session, ctx.workspace_id, query)
    return AuditLogPage(workspace=ctx.workspace.slug, events=events, next_cursor=next_cursor)
