"""The HTTP server's deadlines for headers and bodies: `gua-board serve --workers 2` of
its own with small deadlines (1-3 s), raw sockets. (The security suite's slow clients,
test_slow_clients.py, run against its board's larger limits all at once.)

A client that trickles its headers or body (or sends nothing) must lose its connection
with a 408, or silently where nothing of a request came, instead of holding a worker.
Deadlines in the assertions are generous (30 s against limits of 1-3 s): these tests
say "cut off", never "cut off fast".
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from websockets.sync.client import connect as ws_connect

from agent import AGENT_VERSION
from agent.fake import FakeCollector
from board.httpserver import BodyDeadlineMiddleware, uvicorn_options
from board.settings import Settings
from tests.support.databases import cloned_database
from tests.support.live import start_board, stop_board

HEADER_SECONDS = 1.0
BODY_IDLE_SECONDS = 1.0
BODY_SECONDS = 3.0
CUT_OFF_WITHIN = 30.0  # seconds: generous, the machine is shared and slow
TRICKLE_EVERY = 0.5


@dataclass
class Board:
    host: str
    port: int
    agent_token: str
    api_token: str
    slug: str

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=CUT_OFF_WITHIN)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def healthy(self) -> bool:
        return httpx.get(f"{self.url}/healthz", timeout=CUT_OFF_WITHIN).status_code == 200


@pytest.fixture(scope="module")
def board(
    pg_admin_url: str, template_db: str, worker_tag: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Board]:
    """One server for the module (starting two workers is the slow part), own database."""
    with cloned_database(pg_admin_url, template_db, f"gua_t_{worker_tag}_slow_clients") as url:
        served = start_board(
            url,
            tmp_path_factory.mktemp("slow-clients"),
            {
                "GUA_BOARD_HTTP_HEADER_SECONDS": str(HEADER_SECONDS),
                "GUA_BOARD_HTTP_BODY_IDLE_SECONDS": str(BODY_IDLE_SECONDS),
                "GUA_BOARD_HTTP_BODY_SECONDS": str(BODY_SECONDS),
            },
            workers=2,
        )
        try:
            slug = "slow"
            served.cli("create-workspace", slug, "--name", "Slow clients")
            api_token = json.loads(
                served.cli(
                    "create-user",
                    "admin@slow.example",
                    "--workspace",
                    slug,
                    "--role",
                    "admin",
                    "--json",
                )
            )["apiToken"]
            enrollment_token = json.loads(served.cli("issue-token", "--workspace", slug, "--json"))[
                "enrollmentToken"
            ]
            claimed = httpx.post(
                f"{served.url}/agent/v1/enrollments/claim",
                json={
                    "enrollmentToken": enrollment_token,
                    "hostname": "slow-host",
                    "agentVersion": AGENT_VERSION,
                    "driverVersion": FakeCollector.driver_version,
                },
                timeout=CUT_OFF_WITHIN,
            )
            assert claimed.status_code == 201, claimed.text
            yield Board("127.0.0.1", served.port, claimed.json()["agentToken"], api_token, slug)
            log = served.log_text()
            assert served.process.poll() is None, f"gua-board serve died: {log[-3000:]}"
            # Nothing of the deadlines' code in a traceback (a loaded machine may log others:
            # uvicorn restarts a worker that misses its 5 s health check while starting).
            assert "board/httpserver.py" not in log, log[-3000:]
        finally:
            stop_board(served)


@dataclass
class CutOff:
    """How a slow client's connection ended: what it got, and how much it had sent."""

    received: bytes
    sent: int


def _read_to_close(sock: socket.socket, received: bytes, deadline: float) -> bytes:
    """Everything until the server closes (a reset counts as closed)."""
    while True:
        assert time.monotonic() < deadline, f"still open; got {received!r}"
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            return received
        if not chunk:
            return received
        received += chunk


def trickle(sock: socket.socket, data: bytes, every: float = TRICKLE_EVERY) -> CutOff:
    """Send `data` one byte every `every` seconds until the server answers or closes."""
    deadline = time.monotonic() + CUT_OFF_WITHIN
    for sent in range(len(data)):
        assert time.monotonic() < deadline, f"not cut off after {sent} bytes"
        try:
            sock.sendall(data[sent : sent + 1])
        except (BrokenPipeError, ConnectionResetError):
            return CutOff(_read_to_close(sock, b"", deadline), sent)
        readable, _, _ = select.select([sock], [], [], every)
        if readable:
            return CutOff(_read_to_close(sock, b"", deadline), sent + 1)
    raise AssertionError("the whole request was accepted, one byte at a time")


def wait_closed(sock: socket.socket) -> bytes:
    return _read_to_close(sock, b"", time.monotonic() + CUT_OFF_WITHIN)


def assert_408(response: bytes, mentions: str) -> None:
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), response
    assert b"connection: close" in head.lower(), head
    detail = json.loads(body)["detail"]
    assert isinstance(detail, str)
    assert mentions in detail, detail


def test_trickled_headers_are_cut_off(board: Board) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: board\r\nX-Slow: " + b"a" * 400 + b"\r\n\r\n"
    with board.connect() as sock:
        cut = trickle(sock, request)
    assert cut.sent < len(request)
    if cut.received:  # else the close raced the 408 out of the socket
        assert_408(cut.received, "headers")
    assert board.healthy()


def test_partial_headers_then_silence_get_408(board: Board) -> None:
    with board.connect() as sock:
        sock.sendall(b"POST /agent/v1/observations HTTP/1.1\r\nHost: board\r\nContent-")
        assert_408(wait_closed(sock), "did not arrive within 1 second.")


def test_endless_headers_are_cut_off_by_size(board: Board) -> None:
    """Not slow but huge: httptools alone would keep every header byte in memory."""
    line = b"X-Big: " + b"a" * 8000 + b"\r\n"
    with board.connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: board\r\n")
        deadline = time.monotonic() + CUT_OFF_WITHIN
        sent, received = 0, b""
        while sent < 64 * 1024 * 1024:
            assert time.monotonic() < deadline, f"not cut off after {sent} bytes"
            try:
                sock.sendall(line * 8)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(line) * 8
            if select.select([sock], [], [], 0)[0]:
                received = _read_to_close(sock, b"", deadline)
                break
        assert sent < 64 * 1024 * 1024
    if received:
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431 "), head
        assert isinstance(json.loads(body)["detail"], str)
    assert board.healthy()


def test_a_connection_that_sends_nothing_is_closed_silently(board: Board) -> None:
    with board.connect() as sock:
        assert wait_closed(sock) == b""


def test_an_idle_keep_alive_connection_is_closed_after_its_responses(board: Board) -> None:
    with board.connect() as sock:
        for _ in range(3):  # each response re-arms the deadline, each request's headers end it
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: board\r\n\r\n")
            head = b""
            while b'"ok"' not in head:
                chunk = sock.recv(65536)
                assert chunk, head
                head += chunk
            assert head.startswith(b"HTTP/1.1 200 "), head
            time.sleep(HEADER_SECONDS / 4)
        assert wait_closed(sock) == b""


def test_pipelined_requests_are_all_answered(board: Board) -> None:
    with board.connect() as sock:
        request = b"GET /healthz HTTP/1.1\r\nHost: board\r\n\r\n"
        sock.sendall(request * 3)
        received = wait_closed(sock)
    assert received.count(b"HTTP/1.1 200 ") == 3, received
    assert b"HTTP/1.1 408" not in received  # a bare "408" also turns up inside random request ids


def _body_request(board: Board, path: str, length: int) -> bytes:
    token = board.agent_token if path == "/agent/v1/observations" else "unused"
    return (
        f"POST {path} HTTP/1.1\r\nHost: board\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


@pytest.mark.parametrize("path", ["/agent/v1/observations", "/agent/v1/enrollments/claim"])
def test_a_trickled_body_is_cut_off(board: Board, path: str) -> None:
    body = b"{" + b" " * 2000 + b"}"
    with board.connect() as sock:
        sock.sendall(_body_request(board, path, len(body)))
        cut = trickle(sock, body)  # faster than the idle limit, never done within the total
    assert cut.sent < len(body)
    if cut.received:
        assert_408(cut.received, "did not arrive within 3 seconds")
    assert board.healthy()


@pytest.mark.parametrize("path", ["/agent/v1/observations", "/agent/v1/enrollments/claim"])
def test_a_stalled_body_gets_408(board: Board, path: str) -> None:
    with board.connect() as sock:
        sock.sendall(_body_request(board, path, 100) + b'{"observedAt": ')
        assert_408(wait_closed(sock), "stalled")


def test_idle_and_slow_connections_do_not_stop_others(board: Board) -> None:
    held: list[socket.socket] = []
    try:
        for i in range(50):
            sock = board.connect()
            if i % 2:  # half send the start of a request and stall
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: bo")
            held.append(sock)
        with httpx.Client(base_url=board.url, timeout=CUT_OFF_WITHIN) as client:
            for _ in range(10):
                assert client.get("/healthz").status_code == 200
        for sock in held:
            wait_closed(sock)  # and every one of them is let go
    finally:
        for sock in held:
            sock.close()
    assert board.healthy()


def test_streams_outlive_the_deadlines(board: Board) -> None:
    """The deadlines end at the headers and the body: open streams are not cut."""
    util = {"type": "util", "gpus": [{"deviceUuid": "GPU-0", "utilPct": 42, "memUsedMb": 1}]}
    sse_headers = {"Authorization": f"Bearer {board.api_token}"}
    sse_url = f"{board.url}/api/v1/workspaces/{board.slug}/stream"
    with (
        httpx.stream("GET", sse_url, headers=sse_headers, timeout=CUT_OFF_WITHIN) as sse,
        ws_connect(
            f"ws://{board.host}:{board.port}/agent/v1/stream",
            additional_headers={"Authorization": f"Bearer {board.agent_token}"},
            open_timeout=CUT_OFF_WITHIN,
        ) as agent,
    ):
        assert sse.status_code == 200
        lines = sse.iter_lines()
        assert next(lines) == "event: hello"
        # Longer than every deadline (and the keep-alive): both must still be open.
        time.sleep(max(HEADER_SECONDS, BODY_SECONDS, 5.0) + 1.5)
        agent.send(json.dumps({**util, "ts": time.time()}))
        # Through PostgreSQL to whichever worker holds the SSE.
        deadline = time.monotonic() + CUT_OFF_WITHIN
        for line in lines:
            if line == "event: util":
                break
            assert time.monotonic() < deadline, "no util event"
        else:
            raise AssertionError("the SSE stream ended")


async def _echo_size(scope: Scope, receive: Receive, send: Send) -> None:
    """A bare ASGI app: reads the whole body, answers its size and how many reads it took."""
    size = reads = 0
    while True:
        message = await receive()
        reads += 1
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = json.dumps({"size": size, "reads": reads}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def test_a_body_sent_in_pauses_within_the_limits_is_read_whole() -> None:
    """The deadlines' slow path (a read that waits for the client) hands every chunk on."""
    settings = Settings(http_header_seconds=60, http_body_idle_seconds=60, http_body_seconds=120)
    app = BodyDeadlineMiddleware(
        _echo_size,
        idle_seconds=settings.http_body_idle_seconds,
        total_seconds=settings.http_body_seconds,
    )
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", **uvicorn_options(settings)
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not serving.done()
            await asyncio.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):  # twice on one keep-alive connection
            writer.write(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 30\r\n\r\n")
            for piece in range(3):
                writer.write(b"%d" % piece * 10)
                await writer.drain()
                await asyncio.sleep(0.3)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CUT_OFF_WITHIN)
            assert head.startswith(b"HTTP/1.1 200 "), head
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            answer = json.loads(await reader.readexactly(length))
            assert answer["size"] == 30
            assert answer["reads"] >= 2  # at least one read really waited
        writer.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, CUT_OFF_WITHIN)
