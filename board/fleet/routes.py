"""GET hosts, GET one host: the hosts with their newest GPUs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from board.auth.deps import ReaderDep
from board.db.deps import SessionDep
from board.fleet import service
from board.fleet.schemas import HostListOut, HostOut
from board.fleet.search import MAX_QUERY_CHARS, SortKey

router = APIRouter(prefix="/api/v1/workspaces/{slug}/hosts", tags=["hosts"])


@router.get("", response_model=HostListOut, summary="List hosts")
async def list_hosts(
    ctx: ReaderDep,
    session: SessionDep,
    q: Annotated[str, Query(max_length=MAX_QUERY_CHARS)] = "",
    sort: SortKey = "name",
) -> HostListOut:
    """`q`: host name, Linux user, GPU model or UUID; `sort`: name, idle_held (longest
    first), util or memory (largest first)."""
    return HostListOut(hosts=await service.list_hosts(session, ctx, q, sort))


@router.get("/{host_id}", response_model=HostOut, summary="One host")
async def get_host(host_id: str, ctx: ReaderDep, session: SessionDep) -> HostOut:
    return await service.get_host(session, ctx, host_id)
