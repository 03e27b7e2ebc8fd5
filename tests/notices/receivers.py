"""Real receivers started by the tests: an HTTP server that checks Standard Webhooks
signatures, a TCP server that accepts and never answers, and an SMTP server (aiosmtpd)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler
from typing import Any

from aiosmtpd.controller import Controller
from standardwebhooks import Webhook, WebhookVerificationError

from tests.http_servers import QuietHTTPServer
from tests.support.ports import free_port


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    verified: bool
    answered: int | None = None

    @property
    def event_id(self) -> str:
        return self.headers.get("webhook-id", "")

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class HttpReceiver:
    """Answers POSTs with the statuses in `script` (then 200), after `hold` seconds if set.

    Every request is recorded, with whether its signature verified (when `secret` is set).
    """

    port: int = 0
    secret: str | None = None
    script: list[int] = field(default_factory=list)
    headers_out: dict[str, str] = field(default_factory=dict)
    hold: Callable[[Received], float] | None = None
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    server: QuietHTTPServer | None = None

    def start(self) -> HttpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                verified = False
                if receiver.secret:
                    try:
                        Webhook(receiver.secret).verify(body, headers)
                        verified = True
                    except WebhookVerificationError:
                        verified = False
                seen = Received(headers, body, verified)
                receiver.received.append(seen)
                if receiver.hold is not None:
                    pause = receiver.hold(seen)
                    if pause and receiver.release.wait(pause):
                        return  # released at teardown: no answer at all
                status = receiver.script.pop(0) if receiver.script else 200
                self.send_response(status)
                for name, value in receiver.headers_out.items():
                    self.send_header(name, value)
                answer = b'{"ok": true}' if status < 300 else b"not now"
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                seen.answered = status

            def log_message(self, *args: Any) -> None:
                pass

        self.server = QuietHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def stop(self) -> None:
        self.release.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def delivered(self) -> list[Received]:
        return [r for r in self.received if r.answered is not None and r.answered < 300]


class SilentReceiver:
    """A TCP server that accepts every connection, reads what is sent and never answers:
    a receiver gone wrong. Counts the connections open now, and the most ever open."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.accepted = 0
        self.open = 0
        self.most_open = 0
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.connections: list[socket.socket] = []

    def start(self) -> SilentReceiver:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed at stop
            with self.lock:
                self.accepted += 1
                self.open += 1
                self.most_open = max(self.most_open, self.open)
                self.connections.append(conn)
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        try:
            while conn.recv(65536):
                pass  # read and drop; never answer
        except OSError:
            pass
        with self.lock:
            self.open -= 1

    def stop(self) -> None:
        self.stopped.set()
        self.listener.close()
        with self.lock:
            for conn in self.connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()


class _Mailbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], Message]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        self.messages.append((list(envelope.rcpt_tos), message_from_bytes(envelope.content)))
        return "250 OK"


class SmtpReceiver:
    def __init__(self) -> None:
        self.mailbox = _Mailbox()
        self.controller = Controller(self.mailbox, hostname="127.0.0.1", port=free_port())

    def start(self) -> SmtpReceiver:
        self.controller.start()
        return self

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.controller.port}"

    @property
    def messages(self) -> list[tuple[list[str], Message]]:
        return self.mailbox.messages

    def stop(self) -> None:
        self.controller.stop()


def wait_until(check: Callable[[], Any], what: str, seconds: float = 60.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.1)
