"""GET /api/v1/workspaces/{slug}/audit-log (admins): newest first, by time range and cursor."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from board.audit import service
from board.audit.schemas import AuditLogPage
from board.auth.deps import AdminDep
from board.db.deps import SessionDep
from board.errors import Unprocessable, explained_pattern

router = APIRouter(prefix="/api/v1/workspaces/{slug}", tags=["audit"])

MAX_LIMIT = 500
# A time with a UTC offset, as RFC 3339 writes it (seconds optional, a space for the T).
# Read as text: pydantic's datetime also takes a number as Unix seconds (`to=0.5`).
_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)
DATE_TIME = {"format": "date-time"}


def _digits_at_most(limit: int) -> str:
    """A regular expression for the digit strings (leading zeros too) of at most as many
    characters as `limit` has digits whose value is at most `limit`: what parse_cursor takes."""
    text = str(limit)
    shorter = f"[0-9]{{1,{len(text) - 1}}}"
    same = [text] + [
        f"{text[:i]}[0-{int(d) - 1}][0-9]{{{len(text) - i - 1}}}"
        for i, d in enumerate(text)
        if d != "0"
    ]
    return f"^({'|'.join([shorter, *same])})$"


CURSOR = {
    "pattern": explained_pattern(
        _digits_at_most(service.MAX_CURSOR), "must be the nextCursor of a previous page"
    )
}


def parse_time(label: str, value: str | None) -> datetime | None:
    """A bound of the query as a time with a UTC offset, or a 422 saying so."""
    if value is None:
        return None
    example = "2026-12-01T00:00Z" if label == "from" else "2026-12-02T00:00Z"
    refusal = Unprocessable(f"'{label}' must be a time with a UTC offset, e.g. {example}.")
    if not _TIME.fullmatch(value.strip()):
        raise refusal
    try:
        return datetime.fromisoformat(value.strip().upper())
    except ValueError:
        raise refusal from None


def audit_query(
    since_text: str | None, until_text: str | None, limit: int, cursor: str | None
) -> service.AuditQuery:
    """The query's bounds, checked; a bad one is a 422 with a sentence."""
    since = parse_time("from", since_text)
    until = parse_time("to", until_text)
    if since is not None and until is not None and until <= since:
        raise Unprocessable("'to' must be after 'from'.")
    before_id = None
    if cursor is not None:
        before_id = service.parse_cursor(cursor)
        if before_id is None:
            raise Unprocessable("'cursor' must be the nextCursor of a previous page.")
    return service.AuditQuery(since=since, until=until, limit=limit, before_id=before_id)


@router.get("/audit-log", response_model=AuditLogPage, summary="Audit log")
async def audit_log(
    ctx: AdminDep,
    session: SessionDep,
    since: Annotated[
        str | None, Query(alias="from", max_length=64, json_schema_extra=DATE_TIME)
    ] = None,
    until: Annotated[
        str | None, Query(alias="to", max_length=64, json_schema_extra=DATE_TIME)
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    # The pattern is the OpenAPI's (what parse_cursor takes); the sentence is the handler's.
    cursor: Annotated[str | None, Query(max_length=32, json_schema_extra=CURSOR)] = None,
) -> AuditLogPage:
    """Every admin action and sign-in in the workspace; never a token or a password."""
    query = audit_query(since, until, limit, cursor)
    events, next_cursor = await service.list_events(session, ctx.workspace_id, query)
    return AuditLogPage(workspace=ctx.workspace.slug, events=events, next_cursor=next_cursor)
