"""The streamed answer of a report, which owns the report's database connection."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class ReportStreamResponse(StreamingResponse):
    """A StreamingResponse that closes the report's connection when it ends, however it
    ends: sent in full, failed, or the client gone (Starlette cancels the body then,
    and psycopg cancels a query in flight). Closing it frees the report's slot."""

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        chunks: AsyncIterator[bytes],
        media_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(chunks, media_type=media_type, headers=headers)
        self.conn = conn
        self.chunks = chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                aclose = getattr(self.chunks, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                await self.conn.close()
