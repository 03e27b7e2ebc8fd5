"""Hosts themselves: their ids, rows and GPU models; revoking a host."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from functools import partial

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from board.auth import routing
from board.auth.deps import WorkspaceContext
from board.db.engine import after_commit
from board.errors import NotFound
from board.hosts.models import Gpu, GpuNameHistory, Host
from board.hosts.revocation import REVOKE_CHANNEL, RevocationListener, revocation_payload


def canonical_host_id(host_id: str) -> str:
    """A host id as the board writes it: uuid.UUID also reads upper case, braces, no
    hyphens and urn:uuid:, and such a spelling must not be echoed or audited as is."""
    try:
        return str(uuid.UUID(host_id))
    except ValueError:
        raise NotFound("No such host in this workspace.") from None


async def get_host_row(session: AsyncSession, workspace_id: int, host_id: str) -> Host:
    try:
        public_id = uuid.UUID(host_id)
    except ValueError:
        raise NotFound("No such host in this workspace.") from None
    host = await session.scalar(
        select(Host).where(Host.workspace_id == workspace_id, Host.public_id == public_id)
    )
    if host is None:
        raise NotFound("No such host in this workspace.")
    return host


async def revoke_host(
    session: AsyncSession, listener: RevocationListener, ctx: WorkspaceContext, host_id: str
) -> Host:
    """Revoke a host everywhere: its agent token stops working once the session commits.

    The one way hosts are revoked (the API and the admin page both call it). The
    revocation must reach every board process the moment it is durable: the
    notification is sent inside the revoking transaction, so PostgreSQL delivers it to
    every listening process when (and only if) it commits, and this process forgets
    the host right after that commit (`after_commit`: the request's session runs it
    before the answer is sent) without waiting for its own copy. The history stays.
    """
    host = await get_host_row(session, ctx.workspace_id, host_id)
    if host.revoked_at is None:
        host.revoked_at = datetime.now(UTC)
    # Its token routes nowhere any more (board.auth.routing), in the revoking transaction.
    await routing.session_drop(
        session, routing.AGENT_TOKEN, [host.agent_token_hash], host.workspace_id
    )
    key = (host.workspace_id, host.id)
    await session.execute(select(func.pg_notify(REVOKE_CHANNEL, revocation_payload(*key))))
    after_commit(session, partial(listener.announce_revocation, *key))
    return host


async def gpu_models(session: AsyncSession, workspace_id: int) -> list[str]:
    """Every GPU model the workspace's hosts have reported, now or before a rename (what
    prices are set for), in byte order."""
    names = (
        select(Gpu.name)
        .where(Gpu.workspace_id == workspace_id)
        .union(select(GpuNameHistory.name).where(GpuNameHistory.workspace_id == workspace_id))
    )
    found = (await session.scalars(names)).all()
    return sorted(set(found), key=lambda name: name.encode())
