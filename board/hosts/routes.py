"""POST revoke: a host's agent token stops working everywhere."""

from __future__ import annotations

from fastapi import APIRouter

from board.audit.deps import ClientAddressDep
from board.audit.service import record
from board.auth.deps import AdminDep
from board.db.deps import SessionDep
from board.hosts import service
from board.hosts.revocation import RevocationListenerDep
from board.hosts.schemas import RevokedHostOut

router = APIRouter(prefix="/api/v1/workspaces/{slug}/hosts", tags=["hosts"])


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
