"""A scheduler job's page, /w/{slug}/jobs/{publicId} (board.web.job_page): every role
reads it; who else runs on its GPUs (processes' users) only admins and members see."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from board.db.deps import SessionDep
from board.web.deps import PageDep
from board.web.job_page import job_view
from board.web.render import PageRoute, render

router = APIRouter(prefix="/w/{slug}/jobs", route_class=PageRoute, include_in_schema=False)


@router.get("/{public_id}")
async def job_page(
    request: Request,
    public_id: Annotated[str, Path(max_length=64)],
    page: PageDep,
    db: SessionDep,
) -> Response:
    workspace = page.ctx.workspace
    context = await job_view(
        db, page.ctx.workspace_id, workspace.timezone, workspace.stale_after_seconds, public_id
    )
    context.update(page=page, nav="jobs")
    return render(request, "job.html", context)
