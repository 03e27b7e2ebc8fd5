"""The streamed answer of a report, which owns the report's database connection."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from starlette.datastructures import Headers
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

# gzip's fastest level. The app's GZipMiddleware (level 9) compresses report text at
# ~40 MiB/s of CPU: 15 s for a 620 MiB 90-day hourly export, far more than making it.
# Level 1 runs ~6x faster for a body ~1.4x larger (about 12x smaller than the text).
GZIP_LEVEL = 1


def accepts_gzip(headers: Headers) -> bool:
    """The same test as Starlette's GZipMiddleware, which then passes our body through."""
    return "gzip" in headers.get("accept-encoding", "")


async def gzipped(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The chunks as one gzip stream; the head is flushed at once (a first byte soon)."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = True
    async for chunk in chunks:
        out = compressor.compress(chunk)
        if first:
            out += compressor.flush(zlib.Z_SYNC_FLUSH)
            first = False
        if out:
            yield out
    yield compressor.flush()


class ReportStreamResponse(StreamingResponse):
    """A StreamingResponse that closes the report's connection when it ends, however it
    ends: sent in full, failed, or the client gone (Starlette cancels the body then,
    and psycopg cancels a query in flight). Closing it frees the report's slot.

    With `gzip`, the body is compressed here at the fastest level and sent with
    Content-Encoding: gzip, which the app's GZipMiddleware leaves as it is."""

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        chunks: AsyncIterator[bytes],
        media_type: str,
        headers: dict[str, str] | None = None,
        gzip: bool = False,
    ) -> None:
        all_headers = {**(headers or {}), "Vary": "Accept-Encoding"}
        if gzip:
            all_headers["Content-Encoding"] = "gzip"
        body = gzipped(chunks) if gzip else chunks
        super().__init__(body, media_type=media_type, headers=all_headers)
        self.conn = conn
        self.chunks = chunks
        self.sent_body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                for stream in (self.sent_body, self.chunks):
                    aclose = getattr(stream, "aclose", None)
                    if aclose is not None:
                        await aclose()
            finally:
                await self.conn.close()
