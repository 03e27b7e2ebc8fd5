"""A workspace's live stream as Server-Sent Events: what the process kept, then live
samples. The REST stream and the host page (cookie sign-in) both answer with it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

from board.stream.hub import StreamHub

KEEPALIVE_SECONDS = 15.0


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


def sse_response(
    hub: StreamHub, workspace_id: int, host_id: str | None = None
) -> StreamingResponse:
    """The response any authenticated page can return (the web pages reuse it)."""
    return StreamingResponse(
        sse_events(hub, workspace_id, host_id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
