"""The streamed answer of a report, which owns the report's database connection."""

from __future__ import annotations

import struct
import zlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from starlette.datastructures import Headers
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from board.edge import accepts_gzip as client_accepts_gzip
from board.reportkit.deflated import Deflated, crc32_combine, inflate

# gzip's fastest level. The app's GZipMiddleware (level 9) compresses report text at
# ~40 MiB/s of CPU: 15 s for a 620 MiB 90-day hourly export, far more than making it.
# Level 1 runs ~6x faster for a body ~1.4x larger (about 12x smaller than the text).
GZIP_LEVEL = 1
# Parts are joined into chunks of about this size: a kept report is thousands of small
# segments, and each ASGI send costs far more than joining them.
CHUNK_BYTES = 256 << 10
# gzip member header: deflate, no name or time, "fastest", Unix.
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\x03"

Part = bytes | Deflated


def accepts_gzip(headers: Headers) -> bool:
    """The app's gzip middleware's own test (board.edge), which then passes our
    already compressed body through."""
    return client_accepts_gzip(headers.get("accept-encoding", ""))


async def gzipped(parts: AsyncIterator[Part]) -> AsyncIterator[bytes]:
    """The parts as one gzip stream. Text is compressed here; a kept segment (raw
    deflate that refers to nothing before it) goes in as it is, after a full flush so
    that no later text refers back across it; the CRC is combined from the segments'.
    The head is flushed at once (a first byte soon)."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    crc = size = 0
    history = False  # text went into the compressor since its last full flush
    out = [GZIP_HEADER]
    held = len(GZIP_HEADER)
    first = True
    async for part in parts:
        if isinstance(part, Deflated):
            if history:
                flushed = compressor.flush(zlib.Z_FULL_FLUSH)
                out.append(flushed)
                held += len(flushed)
                history = False
            out.append(part.data)
            held += len(part.data)
            crc = crc32_combine(crc, part.crc, part.size)
            size += part.size
        else:
            data = compressor.compress(part)
            crc = zlib.crc32(part, crc)
            size += len(part)
            history = True
            if data:
                out.append(data)
                held += len(data)
        if first:
            out.append(compressor.flush(zlib.Z_FULL_FLUSH))
            history = first = False
            held = CHUNK_BYTES
        if held >= CHUNK_BYTES:
            yield b"".join(out)
            out, held = [], 0
    out.append(compressor.flush())
    out.append(struct.pack("<II", crc, size & 0xFFFFFFFF))
    yield b"".join(out)


async def plain(parts: AsyncIterator[Part]) -> AsyncIterator[bytes]:
    """The parts as text: kept segments inflated; the first part sent at once."""
    out: list[bytes] = []
    held = 0
    first = True
    async for part in parts:
        data = inflate(part) if isinstance(part, Deflated) else part
        out.append(data)
        held += len(data)
        if first or held >= CHUNK_BYTES:
            yield b"".join(out)
            out, held = [], 0
            first = False
    if out:
        yield b"".join(out)


class ReportStreamResponse(StreamingResponse):
    """A StreamingResponse that closes the report's connection when it ends, however it
    ends: sent in full, failed, or the client gone (Starlette cancels the body then,
    and psycopg cancels a query in flight). Closing it frees the report's slot.

    With `gzip`, the body is compressed here at the fastest level and sent with
    Content-Encoding: gzip, which the app's GZipMiddleware leaves as it is."""

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        chunks: AsyncIterator[Part],
        media_type: str,
        headers: dict[str, str] | None = None,
        gzip: bool = False,
    ) -> None:
        all_headers = {**(headers or {}), "Vary": "Accept-Encoding"}
        if gzip:
            all_headers["Content-Encoding"] = "gzip"
        body = gzipped(chunks) if gzip else plain(chunks)
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
