"""The audit log page of a workspace (admins): newest first, a page at a time."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from board.audit import service as audit
from board.db.deps import SessionDep
from board.errors import Unprocessable
from board.runtime import RuntimeDep
from board.web.deps import AdminPageDep
from board.web.render import PageRoute, render

router = APIRouter(prefix="/w/{slug}/admin", route_class=PageRoute, include_in_schema=False)

PAGE_SIZE = 100


@router.get("/audit")
async def audit_page(
    request: Request,
    page: AdminPageDep,
    db: SessionDep,
    runtime: RuntimeDep,
    cursor: Annotated[str, Query(max_length=32)] = "",
) -> Response:
    """Who did what, when and from where; "Older" follows the cursor."""
    before_id = None
    if cursor:
        before_id = audit.parse_cursor(cursor)
        if before_id is None:
            raise Unprocessable("This page link is not valid; start from the newest events.")
    query = audit.AuditQuery(limit=PAGE_SIZE, before_id=before_id)
    events, next_cursor = await audit.list_events(db, page.ctx.workspace_id, query)
    context = {
        "page": page,
        "nav": "admin",
        "events": events,
        "next_cursor": next_cursor,
        "first_page": before_id is None,
        # The workspace's retention, but never below the operator's floor (maintenance).
        "kept_days": max(page.ctx.workspace.retention_days, runtime.settings.min_retention_days),
    }
    return render(request, "audit.html", context)
