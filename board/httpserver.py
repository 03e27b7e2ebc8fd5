"""How the board's HTTP server bounds slow clients: header deadline, body deadlines.

uvicorn alone bounds only an idle keep-alive connection (`timeout_keep_alive`, disarmed by
the first byte that arrives). A client that sends its request line and headers one byte
every few seconds, or opens a connection and sends nothing, holds it forever; one that
trickles a body holds a request handler too. So:

- `HeaderDeadlineProtocol` (the connection layer): the request line and all headers must
  arrive within `http_header_seconds` of the connection opening or of the previous
  response, else 408 and the connection is closed; and be at most MAX_HEADER_BYTES, else
  431 and closed.
- `BodyDeadlineMiddleware` (the ASGI layer): each body chunk must arrive within
  `http_body_idle_seconds`, the whole body within `http_body_seconds`, else the handler's
  read fails with 408 and the handler stops.

`uvicorn_options` is what `gua-board serve` and `gua-board demo` both give uvicorn. What
every request meets on its way through the app (NUL and size refusals, gzip, baseline
headers, `read_body`) is in board/edge.py.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import resource
from collections.abc import Generator
from typing import Any, TypedDict, cast

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from board.settings import Settings

log = logging.getLogger(__name__)

# uvicorn's own default, kept: an idle connection after a response is closed after this.
KEEP_ALIVE_SECONDS = 5
# httptools, unlike h11, keeps any amount of header bytes: 2 GB took 5 s and 2 GB of
# memory on loopback. Past this (plus at most one read), 431 and the connection closes.
MAX_HEADER_BYTES = 64 * 1024


def _seconds(value: float) -> str:
    return f"{value:g} second" + ("" if value == 1 else "s")


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (what its "auto" picks), with a deadline for headers.

    The clock starts when the connection opens and when a response completes (unless a
    pipelined request is already waiting), and stops when a request's headers are
    complete. On expiry: 408 with a JSON `detail` if a request had begun, a silent close
    if the client had sent nothing (an idle keep-alive or pre-opened connection: a 408
    there could be read as the answer to a request the client is just sending).
    Everything after the headers (the body, the app) is not this clock's concern.

    The timer is lazy: a request only moves `header_deadline`; the one timer of the
    connection, when it fires, re-arms itself for a deadline that moved. A busy
    keep-alive connection so creates a timer every `header_seconds`, not per request.
    """

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        header_seconds: float,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.header_seconds = header_seconds
        # When the awaited request line and headers are due; None: awaiting none.
        self.header_deadline: float | None = None
        self.header_timer: asyncio.TimerHandle | None = None
        # A request's first byte has arrived and its headers are not complete yet.
        self.request_begun = False
        self.header_bytes = 0  # of the begun request, not counting the read it began in

    def connection_made(  # type: ignore[override]  # uvicorn narrows it the same way
        self, transport: asyncio.Transport
    ) -> None:
        super().connection_made(transport)
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self.header_deadline = None
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        begun = self.request_begun
        super().data_received(data)
        if begun and self.request_begun:  # still inside one request's headers
            self.header_bytes += len(data)
            if self.header_bytes > MAX_HEADER_BYTES and not self.transport.is_closing():
                detail = f"The request line and headers are larger than {MAX_HEADER_BYTES} bytes."
                self._refuse(431, detail)

    def on_message_begin(self) -> None:
        self.request_begun = True
        self.header_bytes = 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self.request_begun = False
        self.header_deadline = None
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        # A queued pipelined request already has its headers: it starts now, no deadline.
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            # Also bounds what is left of a body the app answered without reading.
            self._await_headers()

    def _await_headers(self) -> None:
        self.header_deadline = self.loop.time() + self.header_seconds
        if self.header_timer is None:
            self.header_timer = self.loop.call_at(self.header_deadline, self._check_headers)

    def _check_headers(self) -> None:
        self.header_timer = None
        deadline = self.header_deadline
        if deadline is None or self.transport.is_closing():
            return  # not awaiting headers: the next response arms a timer again
        if self.loop.time() < deadline:  # the clock was restarted since this was armed
            self.header_timer = self.loop.call_at(deadline, self._check_headers)
            return
        self.header_deadline = None
        responding = self.cycle is not None and not self.cycle.response_complete
        if self.request_begun and not responding:
            log.debug("request headers from %s too slow: 408, closing", self.client)
            seconds = _seconds(self.header_seconds)
            self._refuse(408, f"The request line and headers did not arrive within {seconds}.")
        else:
            self.transport.close()

    def _refuse(self, status: int, detail: str) -> None:
        """Answer `status` with a JSON detail, then close: the request is never read on."""
        self.request_begun = False
        self.header_deadline = None
        body = json.dumps({"detail": detail}).encode()
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()


class RequestTimeout(HTTPException):
    """408 from a body read; rendered as {"detail": ...} by the app's handlers."""

    def __init__(self, detail: str) -> None:
        # close: what is left of the body is not worth waiting for on this connection.
        super().__init__(408, detail, headers={"Connection": "close"})


class _Resumed:
    """Awaits an awaitable whose first step already ran and yielded `pending`.

    `yield from` by hand (PEP 380): what the event loop sends or throws in is passed on.
    """

    __slots__ = ("_steps", "_pending")

    def __init__(self, steps: Generator[Any, Any, Message], pending: Any) -> None:
        self._steps = steps
        self._pending = pending

    def __await__(self) -> Generator[Any, Any, Message]:
        steps, pending = self._steps, self._pending
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:  # CancelledError above all: the deadline's
                try:
                    pending = steps.throw(exc)
                except StopIteration as done:
                    return cast(Message, done.value)
            else:
                try:
                    pending = steps.send(sent)
                except StopIteration as done:
                    return cast(Message, done.value)


class BodyDeadline:
    """One request's `receive`, bounded until the body is complete, then passed through.

    Passing through after the last chunk matters: a streaming response waits in
    `receive` for the disconnect for as long as it streams.

    Cheap where it counts: a chunk the server already holds (a small body arrives with
    its headers: every agent push) is returned without any timer; only a read that
    must wait for the client is run under `asyncio.timeout_at` (~10 us a timer here).
    """

    __slots__ = ("_receive", "_idle", "_total", "_deadline", "_done", "_failed")

    def __init__(self, receive: Receive, idle_seconds: float, total_seconds: float) -> None:
        self._receive = receive
        self._idle = idle_seconds
        self._total = total_seconds
        self._deadline: float | None = None
        self._done = False
        # Raised again if the app reads on after the 408: it must not wait unbounded.
        self._failed: RequestTimeout | None = None

    async def receive(self) -> Message:
        if self._done:
            return await self._receive()
        now = asyncio.get_running_loop().time()
        if self._deadline is None:  # the whole body's clock starts at the app's first read
            self._deadline = now + self._total
        steps = self._receive().__await__()
        try:
            pending = steps.send(None)  # first step: done already if the chunk is here
        except StopIteration as done:
            message = cast(Message, done.value)
        else:
            if self._failed is not None:
                steps.close()
                raise self._failed
            idle_until = now + self._idle
            try:
                async with asyncio.timeout_at(min(idle_until, self._deadline)):
                    message = await _Resumed(steps, pending)
            except TimeoutError:
                if idle_until < self._deadline:
                    detail = (
                        f"The request body stalled: nothing arrived for {_seconds(self._idle)}."
                    )
                else:
                    detail = f"The request body did not arrive within {_seconds(self._total)}."
                self._failed = RequestTimeout(detail)
                raise self._failed from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            self._done = True
        return message


class BodyDeadlineMiddleware:
    """Pure ASGI (nothing buffered, responses untouched): bounds how long bodies take."""

    def __init__(self, app: ASGIApp, idle_seconds: float, total_seconds: float) -> None:
        self.app = app
        self.idle_seconds = idle_seconds
        self.total_seconds = total_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bounded = BodyDeadline(receive, self.idle_seconds, self.total_seconds)
        await self.app(scope, bounded.receive, send)


class UvicornOptions(TypedDict, total=False):
    http: type[asyncio.Protocol]
    timeout_keep_alive: int
    timeout_worker_healthcheck: int
    ws_max_size: int
    ws_per_message_deflate: bool


# WebSocket messages (the agents' live stream) are at most 64 KiB of text to be shown;
# past twice that the socket closes (1009) instead of uvicorn's 16 MiB being read.
WS_MAX_MESSAGE_BYTES = 128 * 1024


# A spawned worker imports the whole board before it answers the supervisor's health
# check; on a loaded 2-core machine that took longer than uvicorn's 5 s default, and
# workers were killed and restarted in a loop. Only uvicorn >= 0.36 has the setting.
WORKER_HEALTHCHECK_SECONDS = 30
_HAS_WORKER_HEALTHCHECK = "timeout_worker_healthcheck" in inspect.signature(Config).parameters


def uvicorn_options(settings: Settings) -> UvicornOptions:
    """The connection bounds, for uvicorn.run(...) and uvicorn.Config(...) alike.

    The protocol goes as a partial of a module-level class: uvicorn pickles its config to
    the --workers processes, and a partial of an importable class pickles.

    No limit_concurrency: uvicorn counts every open connection against it, idle and slow
    ones included, so a cap would turn a few hundred held connections into 503s for
    everyone; the deadlines above bound how long each can be held instead. The backlog
    stays uvicorn's 2048 (the kernel caps it at net.core.somaxconn).
    """
    protocol = functools.partial(
        HeaderDeadlineProtocol, header_seconds=settings.http_header_seconds
    )
    options: UvicornOptions = {
        # uvicorn calls it with the protocol's keyword arguments; it is not a class.
        "http": cast("type[asyncio.Protocol]", protocol),
        "timeout_keep_alive": KEEP_ALIVE_SECONDS,
        "ws_max_size": WS_MAX_MESSAGE_BYTES,
        # No permessage-deflate: every frame of one read was inflated (up to the size
        # bound each) before the first was handed on, even before the token was checked;
        # 245 KB of deflated frames grew a worker by 224 MiB. The stream's messages are a
        # few hundred bytes a second: compression saves nothing worth that.
        "ws_per_message_deflate": False,
    }
    if _HAS_WORKER_HEALTHCHECK:
        options["timeout_worker_healthcheck"] = WORKER_HEALTHCHECK_SECONDS
    return options


def raise_open_files_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit (as Go's runtime does), for this process
    and the workers it starts: each connection is a descriptor, and the usual soft 1024
    is a few seconds' worth of connections held up to the header deadline."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Linux refuses an infinite one; 2**20 is its usual fs.nr_open.
    target = 1_048_576 if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not raise the open files limit to %d: %s", target, exc)
