"""GET hosts, GET one host, POST revoke."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from board.auth.deps import WorkspaceDep
from board.hosts import service
from board.runtime import RuntimeDep, SessionDep

router = APIRouter(prefix="/api/v1/workspaces/{slug}/hosts", tags=["hosts"])


@router.get("")
async def list_hosts(ctx: WorkspaceDep, session: SessionDep) -> dict[str, Any]:
    return {"hosts": await service.list_hosts(session, ctx)}


@router.get("/{host_id}")
async def get_host(host_id: str, ctx: WorkspaceDep, session: SessionDep) -> dict[str, Any]:
    return await service.get_host(session, ctx, host_id)


@router.post("/{host_id}/revoke")
async def revoke_host(
    host_id: str, ctx: WorkspaceDep, session: SessionDep, runtime: RuntimeDep
) -> dict[str, Any]:
    ctx.require("admin")
    host = await service.revoke_host(session, runtime, ctx, host_id)
    return {
        "hostId": host_id,
        "revokedAt": host.revoked_at.isoformat() if host.revoked_at else None,
    }
