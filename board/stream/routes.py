"""WS /agent/v1/stream (agents in) and the browsers' Server-Sent Events (samples out:
board.stream.sse, which the host page answers with too)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from contextlib import suppress
from typing import Annotated

from fastapi import APIRouter, Query, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, StreamingResponse

from board.auth.deps import ApiTokenHeader, MemberDep, WorkspaceContext, token_context
from board.db.deps import SessionDep, SessionMakerDep
from board.errors import DomainError, Unauthorized, Unprocessable
from board.hosts.service import get_host_row
from board.ingest.access import AgentAccess, AgentHost, HostWatch
from board.ingest.deps import AccessDep
from board.stream.hub import HubDep
from board.stream.messages import parse_util
from board.stream.samples import Sample
from board.stream.schemas import (
    LatestSample,
    StreamLatest,
    event_stream_schema,
    fleet_stream_schema,
)
from board.stream.sse import StillAllowed, fleet_sse_response, sse_response

log = logging.getLogger(__name__)

agent_router = APIRouter(prefix="/agent/v1", tags=["agent"])
api_router = APIRouter(prefix="/api/v1/workspaces/{slug}/stream", tags=["stream"])

# The agent sends one message a second; more than this is dropped, not fanned out.
MIN_SPACING_SECONDS = 0.2
# An open socket whose host was revoked is closed as soon as the revocation notice
# arrives (board/ingest/access.py). Without notices (listener down or just back) the
# socket looks its host up itself this often; with them, still this often as a backstop.
FALLBACK_RECHECK_SECONDS = 5.0
RECHECK_SECONDS = 60.0


async def _deny(websocket: WebSocket, detail: str) -> None:
    """Refuse the upgrade itself: HTTP 401 with a string detail where the server can."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(
            JSONResponse(
                {"detail": detail}, status_code=401, headers={"WWW-Authenticate": "Bearer"}
            )
        )
    else:
        await websocket.close(code=1008)  # answered 403 before the upgrade


async def _until_revoked(access: AgentAccess, host: AgentHost, watch: HostWatch) -> None:
    """Returns once the host is revoked: told by a notice, or found when looking."""
    while not watch.revoked:
        timeout = RECHECK_SECONDS if access.listening() else FALLBACK_RECHECK_SECONDS
        with suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # not wait_for: see archives.worker
                await watch.event.wait()
        if watch.revoked:
            return
        # A timeout, or the listener went down or came back: notices may be missed.
        watch.event.clear()
        try:
            if not await access.still_allowed(host):
                return
        except Exception as exc:  # no database: keep the socket, look again later
            log.warning("stream: could not re-check host %s (%s)", host.public_id, exc)


async def _close_when_revoked(
    websocket: WebSocket, access: AgentAccess, host: AgentHost, watch: HostWatch
) -> None:
    await _until_revoked(access, host, watch)
    watch.revoked = True
    with suppress(Exception):  # already closing or gone
        await websocket.close(code=1008, reason="host revoked")


@agent_router.websocket("/stream")
async def agent_stream(websocket: WebSocket, access: AccessDep, hub: HubDep) -> None:
    """Agent → board. The agent never reads, so the board never sends a data frame."""
    try:
        host = await access.authenticate(websocket.headers.get("authorization"))
    except Unauthorized as exc:
        await _deny(websocket, exc.detail)
        return
    await websocket.accept()
    hub.stats["connections"] += 1
    bad = 0
    last_sent = 0.0
    with access.watch(host) as watch:
        guard = asyncio.create_task(_close_when_revoked(websocket, access, host, watch))
        try:
            while not watch.revoked:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect" or watch.revoked:
                    break
                now = time.monotonic()
                text = message.get("text")
                util = parse_util(text) if isinstance(text, str) else None
                if util is None:
                    bad += 1
                    hub.stats["bad_messages"] += 1
                    continue
                if now - last_sent < MIN_SPACING_SECONDS:
                    hub.stats["throttled"] += 1
                    continue
                last_sent = now
                hub.publish(
                    Sample(
                        host.workspace_id,
                        host.public_id,
                        util.ts,
                        tuple((g.deviceUuid, g.utilPct, g.memUsedMb) for g in util.gpus),
                        bad,
                    )
                )
        except (WebSocketDisconnect, RuntimeError):
            pass  # RuntimeError: a receive after the guard closed the socket
        finally:
            guard.cancel()
            with suppress(asyncio.CancelledError):
                await guard
            hub.stats["connections"] -= 1
            if bad:
                log.info(
                    "stream: host %s dropped %d bad message(s) on one connection",
                    host.public_id,
                    bad,
                )


def _stream_host(host_id: str | None) -> str | None:
    """The hostId filter as samples carry it (str(uuid.UUID)): any spelling uuid.UUID
    reads matches its host, and anything else is a 422 rather than a stream of nothing."""
    if host_id is None:
        return None
    try:
        return str(uuid.UUID(host_id))
    except ValueError:
        # Not echoed: whatever was pasted there (a token, say) stays out of the answer.
        raise Unprocessable(
            "hostId is not a host id; pass a hostId as the hosts list shows it (a UUID)."
        ) from None


@api_router.get(
    "",
    response_class=StreamingResponse,
    summary="Live utilization (Server-Sent Events)",
    responses={200: {"content": {"text/event-stream": event_stream_schema()}}},
)
async def workspace_stream(
    ctx: MemberDep,
    session: SessionDep,
    sessions: SessionMakerDep,
    hub: HubDep,
    hostId: Annotated[str | None, Query()] = None,  # the API's camelCase
    authorization: ApiTokenHeader = None,
) -> StreamingResponse:
    """Live utilization of the workspace's hosts (or one), as Server-Sent Events.

    A hostId of no host in this workspace (another workspace's included) is a 404, as
    on the host page's stream. The stream ends soon after its token is revoked or
    expires, or its person is removed or made finance."""
    host_id = _stream_host(hostId)
    if host_id is not None:
        await get_host_row(session, ctx.workspace_id, host_id)
    # A browser may listen for hours: the request's session ends (and gives its database
    # connection back) once this returns, before the first event is sent.
    return sse_response(
        hub, ctx.workspace_id, host_id, _token_still_allowed(ctx, sessions, authorization)
    )


def _token_still_allowed(
    ctx: WorkspaceContext, sessions: SessionMakerDep, authorization: str | None
) -> StillAllowed:
    """The stream's token still names a member or admin of its workspace: the checks of
    the request that opened it, made again (sse.while_allowed calls it)."""

    async def still_allowed() -> bool:
        async with sessions() as db:
            try:
                now: WorkspaceContext = await token_context(db, ctx.client_address, authorization)
            except DomainError:
                return False
        return now.workspace_id == ctx.workspace_id and now.role in ("admin", "member")

    return still_allowed


@api_router.get(
    "/fleet",
    response_class=StreamingResponse,
    summary="Live utilization of the whole fleet, framed (Server-Sent Events)",
    responses={200: {"content": {"text/event-stream": fleet_stream_schema()}}},
)
async def fleet_stream(
    ctx: MemberDep,
    sessions: SessionMakerDep,
    hub: HubDep,
    authorization: ApiTokenHeader = None,
) -> StreamingResponse:
    """Every streaming host's newest sample, as one frame per tick (twice a second)
    rather than one event per sample: `hello`, then a keyframe (the host table and every
    host's newest sample), then what changed. Built once per tick for every viewer of the
    workspace; a viewer that reads too slowly skips to the newest keyframe. It ends soon
    after its token is revoked or expires, or its person is removed or made finance."""
    return fleet_sse_response(
        hub, ctx.workspace_id, _token_still_allowed(ctx, sessions, authorization)
    )


@api_router.get("/latest", summary="Each host's newest live sample")
async def latest(ctx: MemberDep, hub: HubDep) -> StreamLatest:
    """Which hosts streamed lately and their newest sample (else: use the snapshots)."""
    newest = hub.newest(ctx.workspace_id)
    now = time.monotonic()
    return StreamLatest(
        keep_seconds=hub.keep_seconds,
        hosts=[
            LatestSample.model_validate({**s.event(), "secondsAgo": round(now - s.received, 3)})
            for s in newest
        ],
    )
