"""WS /agent/v1/stream (agents in) and the browsers' Server-Sent Events (samples out)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, StreamingResponse

from board.auth.deps import WorkspaceDep
from board.errors import Unauthorized
from board.ingest.service import authenticate_agent
from board.runtime import Runtime, RuntimeDep, SessionDep
from board.stream.hub import Sample, StreamHub
from board.stream.messages import parse_util

log = logging.getLogger(__name__)

agent_router = APIRouter(prefix="/agent/v1", tags=["agent"])
api_router = APIRouter(prefix="/api/v1/workspaces/{slug}/stream", tags=["stream"])

# The agent sends one message a second; more than this is dropped, not fanned out.
MIN_SPACING_SECONDS = 0.2
# A revoked host's open socket is closed within this long.
RECHECK_SECONDS = 60.0
KEEPALIVE_SECONDS = 15.0


async def _host_public_id(runtime: Runtime, workspace_id: int, host_id: int) -> str | None:
    async with runtime.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT public_id FROM hosts WHERE workspace_id = %s AND id = %s "
            "AND revoked_at IS NULL",
            [workspace_id, host_id],
        )
        row = await cur.fetchone()
    return str(row[0]) if row else None


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


@agent_router.websocket("/stream")
async def agent_stream(websocket: WebSocket) -> None:
    """Agent → board. The agent never reads, so the board never sends a data frame."""
    runtime: Runtime = websocket.app.state.runtime
    try:
        workspace_id, host_id = await authenticate_agent(
            runtime, websocket.headers.get("authorization")
        )
        public_id = await _host_public_id(runtime, workspace_id, host_id)
        if public_id is None:
            raise Unauthorized("This agent token's host was revoked.")
    except Unauthorized as exc:
        await _deny(websocket, exc.detail)
        return
    await websocket.accept()
    hub = runtime.stream
    hub.stats["connections"] += 1
    bad = 0
    last_sent = 0.0
    checked = time.monotonic()
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            now = time.monotonic()
            if now - checked > RECHECK_SECONDS:
                checked = now
                if await _host_public_id(runtime, workspace_id, host_id) is None:
                    await websocket.close(code=1008, reason="host revoked")
                    break
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
                    workspace_id,
                    public_id,
                    util.ts,
                    tuple((g.deviceUuid, g.utilPct, g.memUsedMb) for g in util.gpus),
                    bad,
                )
            )
    except WebSocketDisconnect:
        pass
    finally:
        hub.stats["connections"] -= 1
        if bad:
            log.info("stream: host %s dropped %d bad message(s) on one connection", public_id, bad)


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def sse_events(
    hub: StreamHub, workspace_id: int, host_id: str | None = None
) -> AsyncIterator[str]:
    """A workspace's stream as SSE: what the process kept, then live samples."""
    with hub.subscribe(workspace_id, host_id) as sub:
        yield _sse("hello", {"keepSeconds": hub.keep_seconds, "hostId": host_id})
        replayed: dict[str, float] = {}
        for sample in hub.recent(workspace_id, host_id):
            replayed[sample.host_id] = sample.ts
            yield _sse("util", sample.event())
        while True:
            try:
                sample = await asyncio.wait_for(sub.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            if sample.ts <= replayed.get(sample.host_id, float("-inf")):
                continue  # already sent from the kept history
            yield _sse("util", sample.event())


def sse_response(
    hub: StreamHub, workspace_id: int, host_id: str | None = None
) -> StreamingResponse:
    """The response any authenticated page can return (the web pages reuse it)."""
    return StreamingResponse(
        sse_events(hub, workspace_id, host_id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@api_router.get("")
async def workspace_stream(
    ctx: WorkspaceDep,
    session: SessionDep,
    runtime: RuntimeDep,
    hostId: Annotated[str | None, Query()] = None,  # the API's camelCase
) -> StreamingResponse:
    """Live utilization of the workspace's hosts (or one), as Server-Sent Events."""
    ctx.require("admin", "member")
    # A browser may listen for hours: hold no database connection meanwhile.
    await session.commit()
    return sse_response(runtime.stream, ctx.workspace_id, hostId)


@api_router.get("/latest")
async def latest(ctx: WorkspaceDep, runtime: RuntimeDep) -> dict[str, Any]:
    """Which hosts streamed lately and their newest sample (else: use the snapshots)."""
    ctx.require("admin", "member")
    newest: dict[str, Sample] = {}
    for sample in runtime.stream.recent(ctx.workspace_id):
        newest[sample.host_id] = sample
    now = time.monotonic()
    return {
        "keepSeconds": runtime.stream.keep_seconds,
        "hosts": [{**s.event(), "secondsAgo": round(now - s.received, 3)} for s in newest.values()],
    }
