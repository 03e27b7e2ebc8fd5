"""A workspace's live stream as Server-Sent Events: what the process kept, then live
samples; and its fleet's frames (board/stream/frames.py). The REST streams and the pages
(cookie sign-in) answer with them."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi.responses import StreamingResponse

from board.errors import as_unavailable
from board.stream.frames import TICK_SECONDS
from board.stream.hub import StreamHub

log = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 15.0
# How stale the check that the listener may still see the stream gets before an event:
# nothing leaves more than this after a sign-out, a revoked token or a removal.
RECHECK_SECONDS = 5.0

StillAllowed = Callable[[], Awaitable[bool]]


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
                async with asyncio.timeout(KEEPALIVE_SECONDS):
                    sample = await sub.get()
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            if sample.ts <= replayed.get(sample.host_id, float("-inf")):
                continue  # already sent from the kept history
            yield _sse("util", sample.event())


async def fleet_sse_events(hub: StreamHub, workspace_id: int) -> AsyncIterator[str | bytes]:
    """A workspace's fleet as SSE: `hello`, then a frame per tick, the first a keyframe.

    Each frame is the bytes the process built once for every viewer of the workspace."""
    with hub.subscribe_fleet(workspace_id) as viewer:
        yield _sse("hello", {"tickSeconds": TICK_SECONDS, "keepSeconds": hub.keep_seconds})
        while True:
            try:
                async with asyncio.timeout(KEEPALIVE_SECONDS):
                    frame = await viewer.get()
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            yield frame


async def while_allowed(
    events: AsyncIterable[str | bytes | memoryview], allowed: StillAllowed
) -> AsyncIterator[str | bytes | memoryview]:
    """The stream, as long as its listener may see it: before an event goes out, the
    request's checks (session or token, membership, role) are made again when the last
    one is older than RECHECK_SECONDS. A stream opened before a sign-out, a revoked token,
    a removal or a demotion to finance used to go on for as long as its client listened;
    the keepalive bounds how long a silent one lasts after that."""
    checked = time.monotonic()
    source = aiter(events)
    try:
        async for event in source:
            if time.monotonic() - checked >= RECHECK_SECONDS:
                try:
                    still = await allowed()
                except Exception as exc:
                    if as_unavailable(exc) is None:
                        raise
                    # The database is away: the check cannot be made, so the stream
                    # ends cleanly (the browser's EventSource reconnects by itself).
                    log.warning("stream: ended, the database is unavailable (%s)", exc)
                    return
                if not still:
                    return
                checked = time.monotonic()
            yield event
    finally:
        close = getattr(source, "aclose", None)  # the hub's subscription ends with it
        if close is not None:
            await close()


def sse_response(
    hub: StreamHub,
    workspace_id: int,
    host_id: str | None = None,
    still_allowed: StillAllowed | None = None,
) -> StreamingResponse:
    """The response any authenticated page can return (the web pages reuse it), checked
    again while it runs with `still_allowed` when given."""
    return _respond(sse_events(hub, workspace_id, host_id), still_allowed)


def fleet_sse_response(
    hub: StreamHub, workspace_id: int, still_allowed: StillAllowed
) -> StreamingResponse:
    """The fleet's frames as a response, checked again while it runs (as sse_response)."""
    return _respond(fleet_sse_events(hub, workspace_id), still_allowed)


def _respond(
    events: AsyncIterable[str | bytes | memoryview], still_allowed: StillAllowed | None
) -> StreamingResponse:
    if still_allowed is not None:
        events = while_allowed(events, still_allowed)
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
