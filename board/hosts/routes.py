"""GET hosts, GET one host, POST revoke."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from board.audit.deps import ClientAddressDep
from board.audit.service import record
from board.auth.deps import AdminDep, ReaderDep
from board.db.deps import SessionDep
from board.hosts import service
from board.hosts.revocation import RevocationListenerDep
from board.hosts.schemas import HostListOut, HostOut, RevokedHostOut
from board.hosts.search import MAX_QUERY_CHARS, SortKey

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


@router.post("/{host_id}/revoke", response_model=RevokedHostOut, summary="Revoke a host")
async def revoke_host(
    host_id: str,
    ctx: AdminDep,
    session: SessionDep,
    listener: RevocationListenerDep,
    address: ClientAddressDep,
) -> RevokedHostOut:
    host_id = service.canonical_host_id(host_id)
    # In the revoking transaction, which the request's session commits before answering.
    await record(session, ctx, "host.revoked", target=host_id, address=address)
    host = await service.revoke_host(session, listener, ctx, host_id)
    return RevokedHostOut(host_id=host_id, revoked_at=host.revoked_at)
