"""The live utilization stream: one `util` message a second over a WebSocket.

Like the released agent (1.6+): `GET /agent/v1/stream` upgraded with the bearer header,
`{"type": "util", "ts": …, "gpus": [{"deviceUuid", "utilPct", "memUsedMb"}]}` once a
second, never a read. It lives on a thread of its own, so a slow or absent board never
delays the 30 s push loop; when the connection drops or cannot be made it tries again
with capped exponential backoff. The stream is for live graphs only: a message that
cannot be sent is dropped, never spooled.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from websockets.exceptions import InvalidStatus, WebSocketException
from websockets.sync.client import ClientConnection, connect

from agent import AGENT_VERSION
from agent.model import UtilReading
from agent.sender import Backoff

log = logging.getLogger(__name__)

STREAM_PATH = "/agent/v1/stream"
SEND_EVERY_SECONDS = 1.0
# A refused upgrade (401: revoked or re-enrolled) is retried this rarely; the push loop
# is the one that tells the operator.
REFUSED_RETRY_SECONDS = 300.0


# What the streamer reads each second: the GPUs' utilization and memory, nothing else.
ReadUtil = Callable[[], list[UtilReading]]


def stream_url(server_url: str) -> str:
    """`https://board.example` → `wss://board.example/agent/v1/stream` (http → ws)."""
    scheme, rest = server_url.split("://", 1)
    return ("wss" if scheme == "https" else "ws") + "://" + rest.rstrip("/") + STREAM_PATH


def util_message(readings: list[UtilReading], ts: float) -> str:
    return json.dumps(
        {
            "type": "util",
            "ts": round(ts, 3),
            "gpus": [
                {"deviceUuid": r.uuid, "utilPct": r.util_pct, "memUsedMb": r.memory_used_mb}
                for r in readings
            ],
        },
        separators=(",", ":"),
    )


class UtilStreamer:
    """Sends utilization once a second on a daemon thread until `stop()`."""

    def __init__(
        self,
        server_url: str,
        agent_token: str,
        read: ReadUtil,
        *,
        every: float = SEND_EVERY_SECONDS,
        connect_timeout: float = 5.0,
        backoff: Backoff | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.url = stream_url(server_url)
        self._token = agent_token
        self._read = read
        self._every = every
        self._connect_timeout = connect_timeout
        self._backoff = backoff or Backoff(base=1.0, cap=60.0)
        self._wall = wall
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gua-agent-stream", daemon=True)
        self._socket: ClientConnection | None = None
        self.sent = 0
        self.connections = 0

    def start(self) -> UtilStreamer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        sock = self._socket
        if sock is not None:
            # Unblocks a send waiting on a board that stopped reading.
            sock.close_socket()
        self._thread.join(timeout)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                with self._connect() as sock:
                    self._socket = sock
                    self.connections += 1
                    log.info("live stream connected to %s", self.url)
                    failures = 0
                    self._send_loop(sock)
            except InvalidStatus as exc:
                status = exc.response.status_code
                log.warning("live stream refused by the board (HTTP %d)", status)
                failures += 1
                wait = REFUSED_RETRY_SECONDS if status == 401 else self._backoff.delay(failures)
                self._stop.wait(wait)
                continue
            except (OSError, WebSocketException, TimeoutError) as exc:
                failures += 1
                log.info("live stream down (%s); retrying", type(exc).__name__)
            except Exception:  # a reading bug must not end the stream for good
                failures += 1
                log.exception("live stream failed")
            finally:
                self._socket = None
            self._stop.wait(self._backoff.delay(failures))

    def _connect(self) -> ClientConnection:
        sock = connect(
            self.url,
            additional_headers={"Authorization": f"Bearer {self._token}"},
            user_agent_header=f"gua-agent/{AGENT_VERSION}",
            open_timeout=self._connect_timeout,
            close_timeout=1.0,
        )
        if not isinstance(sock, ClientConnection):  # only legacy=True answers otherwise
            raise TypeError("websockets returned no connection")
        return sock

    def _send_loop(self, sock: ClientConnection) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            readings = self._read()
            if readings:
                sock.send(util_message(readings, self._wall()))
                self.sent += 1
            due += self._every
            delay = due - time.monotonic()
            if delay < 0:  # a slow read or send: keep the one-a-second pace, no burst
                due, delay = time.monotonic(), 0.0
            if self._stop.wait(delay):
                break
