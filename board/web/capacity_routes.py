"""The "Find GPUs" results page, and retiring a missing GPU from the fleet page."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from board.audit.service import record
from board.capacity.params import parse_capacity
from board.capacity.service import find_capacity
from board.db.deps import SessionDep
from board.errors import DomainError
from board.health.retire import retire_gpu
from board.web.deps import AdminPageDep, CsrfDep, PageDep
from board.web.find_gpus import FindForm, book_link, memory_mb
from board.web.forms import submit
from board.web.render import PageRoute, redirect, render
from board.zones import iana_zone

router = APIRouter(prefix="/w/{slug}", route_class=PageRoute, include_in_schema=False)

Field = Annotated[str, Query(max_length=200)]


@router.get("/find-gpus")
async def find_gpus_page(
    request: Request,
    page: PageDep,
    db: SessionDep,
    gpus: Field = "1",
    min_free_memory_gib: Annotated[str, Query(alias="minFreeMemoryGib", max_length=200)] = "",
    model: Field = "",
    same_host: Annotated[str, Query(alias="sameHost", max_length=200)] = "true",
    from_: Annotated[str, Query(alias="from", max_length=200)] = "",
    to: Field = "",
) -> Response:
    """N GPUs free now or not booked through a range, best fit first (board.capacity)."""
    form = FindForm(gpus, min_free_memory_gib, model, same_host != "false", from_, to)
    zone = iana_zone(page.ctx.workspace.timezone)
    now = datetime.now(UTC)
    answer = error = None
    try:
        query = parse_capacity(
            gpus=gpus,
            min_free_memory_mb=memory_mb(min_free_memory_gib),
            from_=from_,
            to=to,
            same_host=same_host,
            model=model,
            zone=zone,
            now=now,
        )
        answer = await find_capacity(
            db, page.ctx.workspace_id, page.ctx.workspace.stale_after_seconds, query, now
        )
    except DomainError as refused:
        error = refused
    may_book = page.ctx.role in ("admin", "member")
    links = (
        [
            book_link(page.slug, c, answer, zone, now) if may_book else None
            for c in answer.candidates
        ]
        if answer is not None
        else []
    )
    context = {
        "page": page,
        "nav": "fleet",
        "find": form,
        "answer": answer,
        "results": list(zip(answer.candidates, links, strict=True)) if answer else [],
        "error": error.detail if error else None,
    }
    return render(
        request, "find_gpus.html", context, status_code=error.status_code if error else 200
    )


@router.post("/hosts/{host_id}/gpus/{gpu_uuid}/retire")
async def retire(
    request: Request,
    host_id: str,
    gpu_uuid: str,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
) -> Response:
    """A missing GPU gone for good (audited): back to the fleet page."""

    async def change() -> Response:
        retired = await retire_gpu(db, page.ctx, host_id, gpu_uuid)
        await record(
            db,
            page.ctx,
            "gpu.retired",
            target=f"{retired.host_id} GPU {retired.index}",
            detail={"uuid": retired.uuid, "name": retired.name},
        )
        return redirect(request, f"/w/{page.slug}/")

    async def refused(exc: DomainError) -> Response:
        raise exc  # drawn as the board's error page, with its status and sentence

    return await submit(db, page, change, refused)
