"""The agent facing a hostile or broken board: real sockets on 127.0.0.1, no HTTP mocks.

Each server here misbehaves on purpose (redirects elsewhere, endless or trickling
bodies and headers, silence, malformed claims); the agent must keep its token at home
(out of its log too, whatever its config holds), bound its memory and time, and keep
its loop alive.

Also attacked, and held (no test of their own): 100 MB, gzip-bomb and trickling bodies
of a push; Retry-After of -1, 1e999, inf, nan, 1_0, past and year-9999 dates; a token with
spaces, DEL or a leading space; /proc names with NUL, escapes or invalid UTF-8; vanished
pids; a full disk while spooling (the snapshot is lost, the loop goes on).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agent.cli import main as agent_main
from agent.client import Answer, BoardClient, EnrollmentError, Timeouts
from agent.stream import UtilStreamer
from tests.agent.fakes import (
    CONFIG_SECRET,
    CONFIG_TOKEN,
    ScriptedBoard,
    accepted,
    write_config,
)

TOKEN = "gua_agent_hunt0001_s3cr3t-never-elsewhere"
CLAIM_OK = {
    "hostId": "5b0e7c3e-1f0a-4c55-9d6b-2a8f3b1c9e40",
    "displayName": "gpu-node-07",
    "agentToken": TOKEN,
    "tokenPrefix": "gua_agent_hunt0001",
}


# Generous: the condition is what is waited for, never a duration that is asserted.
DEADLINE = 60.0


Handler = Callable[[socket.socket, bytes], None]


T = TypeVar("T")


@dataclass
class RawServer:
    """A TCP server on 127.0.0.1 whose handler writes whatever bytes it likes."""

    handler: Handler
    requests: list[bytes] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = _read_request(conn)
                self.requests.append(request)
                self.handler(conn, request)
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        self.thread.join(5)


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], RawServer]]:
    servers: list[RawServer] = []

    def start(handler: Handler) -> RawServer:
        server = RawServer(handler)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def answer_with(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Handler:
    def handle(conn: socket.socket, _request: bytes) -> None:
        lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    return handle


def in_thread(call: Callable[[], T]) -> T:
    """Run `call` on a thread and wait for it with a generous deadline (a hang fails)."""
    result: list[T] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(DEADLINE)
    assert result, "the agent did not come back: a hostile board held it"
    return result[0]


def headers_of(request: bytes) -> dict[str, str]:
    head = request.partition(b"\r\n\r\n")[0].decode("latin-1")
    pairs = (line.partition(":") for line in head.split("\r\n")[1:])
    return {name.strip().lower(): value.strip() for name, _, value in pairs}


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_host_is_not_followed(
    serve: Callable[[Handler], RawServer], status: int
) -> None:
    elsewhere = serve(answer_with(202, b"{}"))
    board = serve(
        answer_with(status, headers={"Location": elsewhere.url + "/agent/v1/observations"})
    )
    with BoardClient(board.url, agent_token=TOKEN) as client:
        answer = client.post_observation(b"{}")
    assert answer.kind == "retry"
    assert answer.status == status
    assert elsewhere.requests == []


def test_a_redirected_claim_is_not_followed(serve: Callable[[Handler], RawServer]) -> None:
    elsewhere = serve(answer_with(201, json.dumps(CLAIM_OK).encode()))
    board = serve(answer_with(307, headers={"Location": elsewhere.url + "/claim"}))
    with BoardClient(board.url) as client, pytest.raises(EnrollmentError, match="HTTP 307"):
        client.claim("gua_enroll_x_y", hostname="h", agent_version="1", driver_version=None)
    assert elsewhere.requests == []


def test_the_live_stream_never_sends_its_token_to_another_origin(
    serve: Callable[[Handler], RawServer],
) -> None:
    elsewhere = serve(answer_with(404))
    board = serve(answer_with(302, headers={"Location": elsewhere.url.replace("http", "ws")}))
    streamer = UtilStreamer(board.url, TOKEN, lambda: [], connect_timeout=2.0).start()
    try:
        give_up = time.monotonic() + DEADLINE
        while not elsewhere.requests and time.monotonic() < give_up:
            time.sleep(0.05)
    finally:
        streamer.stop()
    assert headers_of(board.requests[0])["authorization"] == f"Bearer {TOKEN}"
    assert elsewhere.requests, "websockets follows the redirect (without the token)"
    assert all(TOKEN.encode() not in r for r in elsewhere.requests)


def test_an_endless_chunked_answer_is_cut(serve: Callable[[Handler], RawServer]) -> None:
    def endless(conn: socket.socket, _request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 503 X\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = b"x" * 65536
        chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        sent = 0
        while sent < 1000:  # 64 MiB at most, should the agent never stop reading
            conn.sendall(chunk)
            sent += 1
            time.sleep(0.01)

    board = serve(endless)
    with BoardClient(board.url, agent_token=TOKEN) as client:
        answer = in_thread(lambda: client.post_observation(b"{}", budget=30.0))
    assert (answer.kind, answer.status) == ("retry", 503)


def test_a_100_mb_answer_is_not_read_whole(serve: Callable[[Handler], RawServer]) -> None:
    sent: list[int] = [0]

    def huge(conn: socket.socket, _request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 500 X\r\nContent-Length: 104857600\r\n\r\n")
        piece = b"{" * 65536
        for _ in range(1600):
            conn.sendall(piece)
            sent[0] += len(piece)

    board = serve(huge)
    with BoardClient(board.url, agent_token=TOKEN) as client:
        answer = in_thread(lambda: client.post_observation(b"{}", budget=30.0))
    assert (answer.kind, answer.status, answer.message) == ("retry", 500, "HTTP 500")
    # The agent hung up long before the end (the socket buffers hold a few MiB at most).
    assert sent[0] < 100 * 1024 * 1024


def test_a_trickling_answer_is_bounded_by_the_budget(
    serve: Callable[[Handler], RawServer],
) -> None:
    def trickle(conn: socket.socket, _request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 202 X\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(100000):  # one byte every 100 ms: each read is well inside 10 s
            conn.sendall(b" ")
            time.sleep(0.1)

    board = serve(trickle)
    timeouts = Timeouts(connect=5.0, read=10.0)
    with BoardClient(board.url, agent_token=TOKEN, timeouts=timeouts) as client:
        answer = in_thread(lambda: client.post_observation(b"{}", budget=1.0))
    # The status line arrived: the board took the snapshot, the rest is not waited for.
    assert (answer.kind, answer.status) == ("accepted", 202)


def test_a_silent_board_times_out_and_is_retried(serve: Callable[[Handler], RawServer]) -> None:
    release = threading.Event()

    def silent(_conn: socket.socket, _request: bytes) -> None:
        release.wait(DEADLINE)

    board = serve(silent)
    timeouts = Timeouts(connect=1.0, read=0.3)
    try:
        with BoardClient(board.url, agent_token=TOKEN, timeouts=timeouts) as client:
            answer = in_thread(lambda: client.post_observation(b"{}", budget=5.0))
    finally:
        release.set()
    assert answer.kind == "retry"
    assert answer.message.startswith("timed out")


def test_a_claim_answer_of_a_megabyte_is_refused(serve: Callable[[Handler], RawServer]) -> None:
    board = serve(answer_with(201, json.dumps({**CLAIM_OK, "agentToken": "a" * 2**20}).encode()))
    with BoardClient(board.url) as client, pytest.raises(EnrollmentError, match="not enrolled"):
        client.claim("gua_enroll_x_y", hostname="h", agent_version="1", driver_version=None)


def test_a_compressed_answer_is_not_inflated(serve: Callable[[Handler], RawServer]) -> None:
    import gzip

    bomb = gzip.compress(b'{"detail": "' + b"a" * 50_000_000 + b'"}')
    board = serve(answer_with(422, bomb, {"Content-Encoding": "gzip"}))
    with BoardClient(board.url, agent_token=TOKEN) as client:
        answer = client.post_observation(b"{}")
    assert (answer.kind, answer.message) == ("rejected", "HTTP 422")
    assert headers_of(board.requests[0])["accept-encoding"] == "identity"


@pytest.mark.parametrize(
    "body",
    [
        b"<html>welcome to the captive portal</html>",
        b"[]",
        b'{"hostId": 7}',
        json.dumps({**CLAIM_OK, "hostId": ["x"]}).encode(),
        json.dumps({**CLAIM_OK, "agentToken": TOKEN + "\r\nX-Evil: 1"}).encode(),
        json.dumps({**CLAIM_OK, "agentToken": "gua agent with spaces"}).encode(),
        json.dumps({**CLAIM_OK, "agentToken": "gua_agent_\u00e9"}).encode(),
        json.dumps({**CLAIM_OK, "displayName": "n" * 10_000}).encode(),
        json.dumps({**CLAIM_OK, "displayName": "gpu\u0000node"}).encode(),
        json.dumps({**CLAIM_OK, "hostId": "../" * 100}).encode(),
        json.dumps({**CLAIM_OK, "tokenPrefix": "p\n" * 3}).encode(),
        b'{"hostId": ' * 100_000,
    ],
    ids=[
        "html",
        "list",
        "int",
        "list-id",
        "token-newline",
        "token-spaces",
        "token-non-ascii",
        "name-10k",
        "name-nul",
        "id-long",
        "prefix-newline",
        "deep-nesting",
    ],
)
def test_a_malformed_claim_answer_enrolls_nothing(
    serve: Callable[[Handler], RawServer], body: bytes
) -> None:
    board = serve(answer_with(201, body))
    with BoardClient(board.url) as client, pytest.raises(EnrollmentError) as caught:
        client.claim("gua_enroll_x_y", hostname="h", agent_version="1", driver_version=None)
    assert "not enrolled" in str(caught.value)


def test_a_200_claim_with_a_good_answer_enrolls(serve: Callable[[Handler], RawServer]) -> None:
    board = serve(answer_with(200, json.dumps(CLAIM_OK).encode()))
    with BoardClient(board.url) as client:
        enrollment = client.claim(
            "gua_enroll_x", hostname="h", agent_version="1", driver_version=None
        )
    assert enrollment.agent_token == TOKEN
    assert TOKEN not in repr(enrollment)


@pytest.mark.parametrize(
    ("status", "retry_after", "kind", "wait"),
    [
        (200, None, "accepted", None),
        (204, None, "accepted", None),
        (429, "-1", "retry", 0.0),
        (429, "1e9", "retry", 3600.0),
        (503, "1e999", "retry", 3600.0),
        (503, "nan", "retry", None),
        (429, "Wed, 21 Oct 2015 07:28:00 GMT", "retry", 0.0),
        (429, "Fri, 31 Dec 9999 23:59:59 GMT", "retry", 3600.0),
        (429, "soon, promise", "retry", None),
        (429, "\u00ff\u00fe", "retry", None),
        (403, "10", "rejected", None),
        (401, "10", "unauthorized", None),
    ],
)
def test_statuses_and_retry_after(
    serve: Callable[[Handler], RawServer],
    status: int,
    retry_after: str | None,
    kind: str,
    wait: float | None,
) -> None:
    headers = {} if retry_after is None else {"Retry-After": retry_after}

    def handle(conn: socket.socket, _request: bytes) -> None:
        # Written as latin-1 bytes so a non-ASCII header value reaches the agent as sent.
        lines = [f"HTTP/1.1 {status} X", "Content-Length: 0", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    board = serve(handle)
    with BoardClient(board.url, agent_token=TOKEN) as client:
        answer: Answer = client.post_observation(b"{}")
    assert (answer.kind, answer.retry_after) == (kind, wait)


def test_a_config_token_with_a_trailing_newline_never_reaches_the_log(
    tmp_path: Path,
    fake_board: Callable[[Callable[[socket.socket], None]], ScriptedBoard],
    capsys: pytest.CaptureFixture[str],
    agent_logging: None,
) -> None:
    """Was: a config whose agentToken ends in a newline (a hand-edited config, a token
    pasted with its line end) makes h11 refuse the header with "Illegal header value
    b'Bearer gua_agent_…\\n'"; the agent takes that for a network error and logs it at
    WARNING: "board not reachable (network error (LocalProtocolError: Illegal header value
    b'Bearer gua_agent_hunt1300_<the whole secret>\\n'))". The redaction filter looks for
    the token as loaded (with a real newline), the message holds its repr (backslash, n),
    so the secret goes to the journal in clear on every outage. The token must never be
    printed: refuse such a config (exit 4, like the claim refuses a token that is not
    visible ASCII), or keep the exception text out of the message."""
    b = fake_board(accepted)
    config = write_config(tmp_path / "config.json", serverUrl=b.url, agentToken=CONFIG_TOKEN + "\n")
    agent_main(
        [
            "push-once",
            "--fake",
            "--config",
            str(config),
            "--spool-dir",
            str(tmp_path / "spool"),
            "--retry-budget",
            "1s",
        ]
    )
    out, err = capsys.readouterr()
    assert CONFIG_SECRET not in out + err, err


def test_trickling_response_headers_are_bounded_by_the_budget(
    fake_board: Callable[[Callable[[socket.socket], None]], ScriptedBoard],
) -> None:
    """Was: a board that sends its status line and then one header line every 200 ms
    held post_observation(budget=1.0) for as long as it liked (still waiting after 15 s
    in the probe; h11 takes up to 16 KiB of head, so one byte every 9 s is 40 hours).
    httpx's read timeout bounds each read, and _exchange's own deadline starts only once
    the headers are in, so a tick of 30 s was not ended by its deadline as docs/agent.md
    promises ("Sends within a tick (including retries) end by the next tick's start").
    The whole exchange, headers included, must end within the budget (here: well inside
    20 s for a budget of 1 s)."""

    def trickle(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 202 Accepted\r\n")
        for _ in range(1500):  # 300 s of headers at most
            conn.sendall(b"X-A: b\r\n")
            time.sleep(0.2)
        conn.sendall(b"Content-Length: 0\r\n\r\n")

    b = fake_board(trickle)
    result: list[Any] = []
    client = BoardClient(b.url, agent_token=CONFIG_TOKEN, timeouts=Timeouts(connect=5.0, read=10.0))
    started = time.monotonic()
    thread = threading.Thread(
        target=lambda: result.append(client.post_observation(b"{}", budget=1.0)), daemon=True
    )
    thread.start()
    thread.join(20.0)
    assert result, f"still waiting after {time.monotonic() - started:.0f} s (budget 1 s)"
