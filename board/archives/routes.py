"""The agent's archive endpoints (agent-api.md) and the host's archive status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from psycopg_pool import AsyncConnectionPool
from starlette.requests import HTTPConnection

from board.archives import service
from board.archives.schemas import ArchiveListOut, HostArchivesOut, PruneOut, UploadOut
from board.archives.upload import spool_body
from board.archives.worker import Archives
from board.auth.deps import ReaderDep
from board.db.deps import PoolDep, SessionDep
from board.errors import DomainError, ServiceUnavailable
from board.hosts.rejections import record_rejection
from board.ingest.access import AgentAccess
from board.ingest.deps import AccessDep
from board.settings import SettingsDep

Pool = AsyncConnectionPool[Any]

agent_router = APIRouter(prefix="/agent/v1/archives", tags=["agent"])
api_router = APIRouter(
    prefix="/api/v1/workspaces/{slug}/hosts/{host_id}/archives", tags=["archives"]
)


async def get_archives(connection: HTTPConnection) -> Archives:
    """This process's archive worker, built by the composition root (board.runtime).

    async: a plain def dependency would run in the threadpool on every call.
    """
    archives: Archives | None = getattr(connection.app.state.runtime, "archives", None)
    if archives is None:
        raise ServiceUnavailable("Archives are not available on this board process.")
    return archives


ArchivesDep = Annotated[Archives, Depends(get_archives)]
Authorization = Annotated[str | None, Header()]


async def _agent(access: AgentAccess, authorization: str | None) -> tuple[int, int]:
    """The agent's host, looked up in the database on every call (the one seam's
    `fresh` lookup): archive calls are rare and act outside the ingest transaction's
    own revocation re-check."""
    host = await access.authenticate(authorization, fresh=True)
    return host.key


async def _rejected(pool: Pool, principal: tuple[int, int], exc: DomainError) -> None:
    """A refused upload shows on the host like a refused push, with the reason."""
    await record_rejection(
        pool,
        principal[0],
        principal[1],
        "archive_rejected",
        exc.detail,
        datetime.now(UTC),
    )


@agent_router.get("")
async def list_archives(
    access: AccessDep, session: SessionDep, authorization: Authorization = None
) -> ArchiveListOut:
    workspace_id, host_id = await _agent(access, authorization)
    objects = await service.list_archives(session, workspace_id, host_id)
    return ArchiveListOut(archives=[service.object_view(o) for o in objects])


@agent_router.post("", status_code=201)
async def upload_archive(
    request: Request,
    access: AccessDep,
    settings: SettingsDep,
    pool: PoolDep,
    session: SessionDep,
    archives: ArchivesDep,
    date: Annotated[str | None, Query()] = None,
    table: Annotated[str | None, Query()] = None,
    authorization: Authorization = None,
) -> UploadOut:
    principal = await _agent(access, authorization)
    try:
        target = service.parse_target(table, date, datetime.now(UTC), settings)
        body = await spool_body(request, settings.archive_max_bytes)
        with body:
            result = await service.store_archive(
                session, archives.store, settings, principal, target, body
            )
    except DomainError as exc:
        await _rejected(pool, principal, exc)
        raise
    await session.commit()  # the worker must see the object when it wakes
    archives.kick()
    return result


@agent_router.delete("")
async def prune_archives(
    access: AccessDep,
    session: SessionDep,
    archives: ArchivesDep,
    olderThanDays: Annotated[str | None, Query()] = None,  # the agent's spelling
    authorization: Authorization = None,
) -> PruneOut:
    principal = await _agent(access, authorization)
    days = service.parse_older_than_days(olderThanDays)
    keys = await service.prune(session, principal, days, datetime.now(UTC))
    await session.commit()  # objects go only once nothing points at them
    for key in keys:
        await archives.store.delete(key)
    return PruneOut(deleted=len(keys))


@api_router.get("")
async def host_archives(host_id: str, ctx: ReaderDep, session: SessionDep) -> HostArchivesOut:
    """Any role may read it, as the host inventory: it holds no process details."""
    return await service.host_archives(session, ctx.workspace_id, host_id)
