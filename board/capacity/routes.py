"""GET …/capacity: where N GPUs are free now, or unbooked through a range ahead."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from board.auth.deps import ReaderDep
from board.capacity.params import TIME_HELP, parse_capacity
from board.capacity.schemas import CapacityOut
from board.capacity.service import find_capacity
from board.db.deps import SessionDep
from board.zones import iana_zone

router = APIRouter(prefix="/api/v1/workspaces/{slug}", tags=["capacity"])

TIME_WORDS = f"With the other: the range [from, to), {TIME_HELP}. Neither: now."


@router.get("/capacity", response_model=CapacityOut, summary="Find free GPUs")
async def capacity(
    ctx: ReaderDep,
    session: SessionDep,
    gpus: Annotated[str | None, Query(description="How many GPUs: 1 (default) to 1024.")] = None,
    min_free_memory_mb: Annotated[
        str | None, Query(alias="minFreeMemoryMb", description="MiB free on each (default 0).")
    ] = None,
    from_: Annotated[str | None, Query(alias="from", description=TIME_WORDS)] = None,
    to: Annotated[str | None, Query(description=TIME_WORDS)] = None,
    same_host: Annotated[
        str | None, Query(alias="sameHost", description="true (default): all on one host.")
    ] = None,
    model: Annotated[
        str | None, Query(description="Part of the GPU's name, any case (at most 100).")
    ] = None,
) -> CapacityOut:
    """`gpus` (1 by default) on one host (`sameHost=true`, the default) or any, with at
    least `minFreeMemoryMb` free each, of a `model` (part of the GPU's name, any case):
    free now, or, with `from` and `to` (dates, local times in the workspace's zone, or
    times with an offset), with no booking in `[from, to)`. Best fit first."""
    now = datetime.now(UTC)
    query = parse_capacity(
        gpus=gpus,
        min_free_memory_mb=min_free_memory_mb,
        from_=from_,
        to=to,
        same_host=same_host,
        model=model,
        zone=iana_zone(ctx.workspace.timezone),
        now=now,
    )
    return await find_capacity(
        session, ctx.workspace_id, ctx.workspace.stale_after_seconds, query, now
    )
