"""The agent's archive endpoints (agent-api.md) and the host's archive status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from psycopg_pool import AsyncConnectionPool
from starlette.requests import HTTPConnection

from board.archives import service
from board.archives.csvfile import TABLES
from board.archives.models import FULL
from board.archives.schemas import ArchiveListOut, HostArchivesOut, PruneOut, UploadOut
from board.archives.upload import spool_body
from board.archives.worker import Archives
from board.auth.deps import ReaderDep
from board.db.deps import PoolDep, SessionDep
from board.db.engine import after_commit
from board.errors import (
    CHECKED_REQUIRED,
    DomainError,
    ServiceUnavailable,
    answers,
    explained_pattern,
)
from board.hosts.rejections import record_rejection
from board.ingest.access import AgentAccess
from board.ingest.deps import AccessDep, AgentTokenHeader
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


@agent_router.get("", summary="List this host's archives")
async def list_archives(
    access: AccessDep, session: SessionDep, authorization: AgentTokenHeader = None
) -> ArchiveListOut:
    workspace_id, host_id = await _agent(access, authorization)
    objects = await service.list_archives(session, workspace_id, host_id)
    return ArchiveListOut(archives=[service.object_view(o) for o in objects])


# What the handler checks (after the token), as the OpenAPI states it.
TABLE = {**CHECKED_REQUIRED, "enum": list(TABLES)}
DAY = {
    **CHECKED_REQUIRED,
    "pattern": explained_pattern(
        f"^([0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}|{FULL})$", f"must be YYYY-MM-DD or {FULL}"
    ),
}
# 0 to 36500 (service.MAX_OLDER_THAN_DAYS), ASCII digits, leading zeros allowed.
OLDER_THAN_DAYS = {
    **CHECKED_REQUIRED,
    "pattern": explained_pattern(
        "^0*([0-9]{1,4}|[12][0-9]{4}|3[0-5][0-9]{3}|36[0-4][0-9]{2}|36500)$",
        "must be a whole number of days from 0 to 36500",
    ),
}

# The body is read by hand (spooled, bounded, checked to be gzip before it is parsed).
ARCHIVE_BODY = {
    "requestBody": {
        "required": True,
        "description": "The table's rows for that day as a gzip-compressed CSV "
        "(docs/agent-api.md, archives).",
        "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@agent_router.post(
    "",
    status_code=201,
    summary="Upload a day's archive (gzip CSV)",
    responses=answers(
        400, 413, meaning={400: "The body is not gzip, or not a CSV of that table and day."}
    ),
    openapi_extra=ARCHIVE_BODY,
)
async def upload_archive(
    request: Request,
    access: AccessDep,
    settings: SettingsDep,
    pool: PoolDep,
    session: SessionDep,
    archives: ArchivesDep,
    date: Annotated[str | None, Query(json_schema_extra=DAY)] = None,
    table: Annotated[str | None, Query(json_schema_extra=TABLE)] = None,
    authorization: AgentTokenHeader = None,
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
    after_commit(session, archives.kick)  # the worker must see the object when it wakes
    return result


@agent_router.delete("", summary="Prune this host's archives older than some days")
async def prune_archives(
    access: AccessDep,
    session: SessionDep,
    archives: ArchivesDep,
    # the agent's spelling
    olderThanDays: Annotated[str | None, Query(json_schema_extra=OLDER_THAN_DAYS)] = None,
    authorization: AgentTokenHeader = None,
) -> PruneOut:
    principal = await _agent(access, authorization)
    days = service.parse_older_than_days(olderThanDays)
    keys = await service.prune(session, principal, days, datetime.now(UTC))

    async def delete_objects() -> None:
        for key in keys:
            await archives.store.delete(key)

    after_commit(session, delete_objects)  # objects go only once nothing points at them
    return PruneOut(deleted=len(keys))


@api_router.get("", summary="A host's archives")
async def host_archives(host_id: str, ctx: ReaderDep, session: SessionDep) -> HostArchivesOut:
    """Any role may read it, as the host inventory: it holds no process details."""
    return await service.host_archives(session, ctx.workspace_id, host_id)
