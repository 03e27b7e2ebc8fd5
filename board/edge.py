"""The app's edge: what every request meets on its way in and every answer on its way out.

- `RequestGuardMiddleware`: NUL in a URL (400) and bodies over the limit on routes
  without their own (413), before any route runs.
- `NegotiatedGZipMiddleware`: Starlette's gzip, for clients that accept it by RFC 9110.
- `BaselineHeadersMiddleware`: the headers no answer should lack.
- `read_body`: how a route with its own body limit (the agent routes) reads its body.

The connection-level bounds (header and body deadlines, uvicorn's options) are in
board/httpserver.py.
"""

from __future__ import annotations

import json
import re

from starlette.exceptions import HTTPException
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from board.errors import PayloadTooLarge


class RequestGuardMiddleware:
    """Pure ASGI, outermost: refuses what no route should ever see.

    - A NUL character in the path or the query string (PostgreSQL text cannot hold one,
      and no id, slug or email of the board has one): 400.
    - A body larger than `max_body_bytes` on any route that does not bound its own body
      (the agent routes do, with their own limits and a rejection counted on the host):
      413 from Content-Length before the app runs, or as soon as the stream passes the
      limit. Without this, FastAPI read a 256 MiB JSON body whole, before checking the
      caller's token, on any JSON or form route.
    """

    def __init__(
        self, app: ASGIApp, max_body_bytes: int, own_limits: tuple[str, ...] = ("/agent/v1/",)
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.own_limits = own_limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        query: bytes = scope.get("query_string", b"")
        if "\x00" in path or b"\x00" in query or b"%00" in query.lower():
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await _send_error(send, 400, "The URL holds a NUL character, which nothing here has.")
            return
        if scope["type"] != "http" or path.startswith(self.own_limits):
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await _send_error(send, 413, _too_large(limit))
                return
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise HTTPException(413, _too_large(limit), headers={"Connection": "close"})
            return message

        await self.app(scope, bounded, send)


_QVALUE = re.compile(r"0(\.[0-9]{0,3})?|1(\.0{0,3})?")


def accepts_gzip(accept_encoding: str) -> bool:
    """The client named gzip (or x-gzip) with a weight above 0: "gzip;q=0" refuses it, and
    "notgzip" is no gzip, where Starlette's test is a substring. An unreadable weight
    counts as a refusal."""
    for item in accept_encoding.split(","):
        coding, _, params = item.partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip"):
            continue
        weight = 1.0
        for param in params.split(";"):
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                value = value.strip()
                weight = float(value) if _QVALUE.fullmatch(value) else 0.0
        return weight > 0
    return False


class NegotiatedGZipMiddleware(GZipMiddleware):
    """Starlette's gzip, for clients that accept it by RFC 9110's rules: the request's
    Accept-Encoding is hidden from it when it only looks like gzip is welcome."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope.get("headers", ())
            given = b",".join(v for k, v in headers if k == b"accept-encoding")
            if b"gzip" in given.lower() and not accepts_gzip(given.decode("latin-1")):
                kept = [(k, v) for k, v in headers if k != b"accept-encoding"]
                scope = {**scope, "headers": kept}
        await super().__call__(scope, receive, send)


# What every answer carries unless its route said otherwise (pages set a full policy in
# board/web/render.py): JSON and errors are never sniffed as HTML, framed or cached, and
# nothing the board answers is kept by a shared cache. Static files keep their caching.
BASELINE_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"cache-control", b"no-store"),
)
STATIC_BASELINE = BASELINE_HEADERS[:3]


class BaselineHeadersMiddleware:
    """Pure ASGI: adds the baseline headers an answer lacks (404s and 405s of no route,
    the REST API, the agent routes), never replacing one a route chose."""

    def __init__(self, app: ASGIApp, static_prefix: str = "/static/") -> None:
        self.app = app
        self.static_prefix = static_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        baseline = STATIC_BASELINE if path.startswith(self.static_prefix) else BASELINE_HEADERS

        async def send_with_baseline(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _ in headers}
                missing = [(k, v) for k, v in baseline if k not in present]
                if missing:
                    message = {**message, "headers": [*headers, *missing]}
            await send(message)

        await self.app(scope, receive, send_with_baseline)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes the limit (before any parsing).

    From Content-Length when it says so, else while the body streams in.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"Request body is larger than the limit of {limit} bytes.")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"Request body is larger than the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> str:
    return f"The request body is larger than the limit of {limit} bytes."


async def _send_error(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
