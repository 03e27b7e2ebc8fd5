"""The two HTTP calls the agent makes to a board, and how their answers are classified."""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx

from agent import AGENT_VERSION
from agent.config import TOKEN_SHAPE

CLAIM_PATH = "/agent/v1/enrollments/claim"
OBSERVATIONS_PATH = "/agent/v1/observations"
JOBS_PATH = "/agent/v1/jobs"
# Longer Retry-After values are treated as this: the agent keeps spooling meanwhile.
MAX_RETRY_AFTER_SECONDS = 3600.0
_MAX_DETAIL_CHARS = 500
# The board's answers are a few hundred bytes; a longer (or endless) body is cut here
# so a broken or hostile server cannot fill the agent's memory.
MAX_ANSWER_BYTES = 64 * 1024
# A send past its budget by this much is hung up on (the body's own deadline is checked
# between reads; this bounds a read that never ends, the response head's included).
_HANG_UP_GRACE_SECONDS = 1.0
# The agent token travels in a header: visible ASCII only, so a newline cannot inject
# headers and an answer of a megabyte is not taken for a token.
# The claim answer's other strings end up in the config, the spool path and every payload.
_CLAIM_MAX_CHARS = {"hostId": 128, "displayName": 255, "tokenPrefix": 64}


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-request limits in seconds: connecting, and waiting for each read of the answer."""

    connect: float = 5.0
    read: float = 10.0

    def bounded(self, budget: float | None) -> httpx.Timeout:
        """These timeouts, none longer than `budget` seconds when one is given."""
        connect, read = self.connect, self.read
        if budget is not None:
            connect, read = min(connect, budget), min(read, budget)
        return httpx.Timeout(connect=connect, read=read, write=read, pool=connect)


@dataclass(frozen=True, slots=True)
class Enrollment:
    """A successful claim. `agent_token` is secret and kept out of repr()."""

    host_id: str
    display_name: str
    token_prefix: str
    agent_token: str

    def __repr__(self) -> str:
        return (
            f"Enrollment(host_id={self.host_id!r}, display_name={self.display_name!r}, "
            f"token_prefix={self.token_prefix!r})"
        )


class EnrollmentError(Exception):
    """Enrollment failed; the message is safe to print (never contains a token)."""


AnswerKind = Literal["accepted", "rejected", "unauthorized", "retry"]


@dataclass(frozen=True, slots=True)
class Answer:
    """What one POST of a snapshot came to.

    - accepted: any 2xx.
    - unauthorized: 401, the host was revoked.
    - rejected: another 4xx; never retried, the snapshot is dropped.
    - retry: 5xx, 429, a network error or timeout, or a status the agent does not
      expect; `retry_after` carries the server's Retry-After in seconds.
    """

    kind: AnswerKind
    status: int | None
    message: str
    retry_after: float | None = None


class BoardClient:
    """An httpx client bound to one board; pass `transport` to test without a network."""

    def __init__(
        self,
        server_url: str,
        *,
        agent_token: str | None = None,
        timeouts: Timeouts | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.server_url = server_url.rstrip("/")
        self.timeouts = timeouts or Timeouts()
        headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            # Answers are read raw and bounded; a compressed one could expand past the bound.
            "Accept-Encoding": "identity",
            "User-Agent": f"gua-agent/{AGENT_VERSION}",
        }
        if agent_token is not None:
            headers["Authorization"] = f"Bearer {agent_token}"
        self._http = httpx.Client(
            headers=headers,
            timeout=self.timeouts.bounded(None),
            transport=transport,
            follow_redirects=False,
            trust_env=True,
        )
        # The sockets this client's connections opened (learned from httpx's trace
        # extension), so that a deadline can hang up the one an exchange waits on.
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()

    def __enter__(self) -> BoardClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def claim(
        self,
        enrollment_token: str,
        *,
        hostname: str | None,
        agent_version: str,
        driver_version: str | None,
    ) -> Enrollment:
        """Exchange a one-time enrollment token for this host's agent token."""
        body: dict[str, str] = {"enrollmentToken": enrollment_token}
        optional = {
            "hostname": hostname,
            "agentVersion": agent_version,
            "driverVersion": driver_version,
        }
        body.update({k: v for k, v in optional.items() if v})
        url = self.server_url + CLAIM_PATH
        try:
            response = self._exchange(
                url, json.dumps(body).encode("utf-8"), self.timeouts.bounded(None), None
            )
        except httpx.HTTPError as exc:
            raise EnrollmentError(
                f"could not reach the board at {self.server_url}: {_describe(exc)}"
            ) from None
        if not response.is_success:
            raise EnrollmentError(f"the board refused the enrollment: {_status_text(response)}")
        data = _json_object(response)
        values: dict[str, str] = {}
        for key in ("hostId", "displayName", "agentToken", "tokenPrefix"):
            value = data.get(key) if data is not None else None
            if not isinstance(value, str) or not _usable_claim_value(key, value):
                raise EnrollmentError(f"the board's answer has no usable {key!r}; not enrolled")
            values[key] = value
        return Enrollment(
            host_id=values["hostId"],
            display_name=values["displayName"],
            token_prefix=values["tokenPrefix"],
            agent_token=values["agentToken"],
        )

    def post_observation(self, body: bytes, *, budget: float | None = None) -> Answer:
        """POST one encoded snapshot; never raises for network or HTTP errors."""
        return self._post(OBSERVATIONS_PATH, body, budget)

    def post_jobs(self, body: bytes, *, budget: float | None = None) -> Answer:
        """POST one `{"jobs": [...]}` body; never raises for network or HTTP errors."""
        return self._post(JOBS_PATH, body, budget)

    def _post(self, path: str, body: bytes, budget: float | None) -> Answer:
        try:
            response = self._exchange(
                self.server_url + path,
                body,
                self.timeouts.bounded(budget),
                budget,
            )
        except httpx.HTTPError as exc:
            return Answer("retry", None, _describe(exc))
        status = response.status
        if response.is_success:
            return Answer("accepted", status, f"HTTP {status}")
        text = _status_text(response)
        if status == 401:
            return Answer("unauthorized", status, text)
        if status == 429 or status >= 500 or status < 400:
            return Answer(
                "retry", status, text, parse_retry_after(response.headers.get("Retry-After"))
            )
        return Answer("rejected", status, text)

    def _exchange(
        self, url: str, body: bytes, timeout: httpx.Timeout, budget: float | None
    ) -> _Reply:
        """POST and read at most MAX_ANSWER_BYTES of the answer within `budget` seconds.

        httpx's timeouts bound each read, not the whole answer: a board trickling a
        byte at a time would hold a tick forever. The status decides the outcome, so
        a body cut short (too long, too slow) is still an answer.
        """
        total = budget if budget is not None else self.timeouts.connect + self.timeouts.read
        give_up_at = time.monotonic() + total
        # httpx bounds each read, so a board trickling header lines (one every few
        # seconds, up to h11's 16 KiB of head) held a send for hours: past the budget,
        # and a little grace, the watchdog shuts the socket down and the read ends.
        watchdog = threading.Timer(total + _HANG_UP_GRACE_SECONDS, self._hang_up)
        watchdog.daemon = True
        watchdog.start()
        try:
            with self._http.stream(
                "POST", url, content=body, timeout=timeout, extensions={"trace": self._trace}
            ) as response:
                received = bytearray()
                # An in-memory answer (a test transport) is already read; a network one
                # streams.
                raw = [response.content] if response.is_stream_consumed else response.iter_raw()
                for chunk in raw:
                    received += chunk
                    if len(received) >= MAX_ANSWER_BYTES or time.monotonic() >= give_up_at:
                        break
                return _Reply(
                    response.status_code, response.headers, bytes(received[:MAX_ANSWER_BYTES])
                )
        finally:
            watchdog.cancel()

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                self._sockets.add(sock)

    def _hang_up(self) -> None:
        """Shut down this client's sockets (one exchange at a time uses the client, so
        the one in flight is among them): a blocked read returns, the send fails."""
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date), capped."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if math.isnan(seconds):
        return None
    return min(MAX_RETRY_AFTER_SECONDS, max(0.0, seconds))


@dataclass(frozen=True, slots=True)
class _Reply:
    """The part of an answer the agent reads: status, headers, and a bounded body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300


def _usable_claim_value(key: str, value: str) -> bool:
    if key == "agentToken":
        return TOKEN_SHAPE.fullmatch(value) is not None
    return bool(value.strip()) and len(value) <= _CLAIM_MAX_CHARS[key] and value.isprintable()


def _json_object(response: _Reply) -> dict[str, Any] | None:
    if response.headers.get("Content-Encoding", "identity").strip().lower() != "identity":
        return None  # read raw: a compressed body is not JSON to the agent
    try:
        data = json.loads(response.body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _status_text(response: _Reply) -> str:
    """`HTTP 422: <detail>` where the body's `detail` is a string, else `HTTP 422`."""
    data = _json_object(response)
    detail = data.get("detail") if data is not None else None
    if isinstance(detail, str) and detail.strip():
        clean = "".join(ch if ch.isprintable() else " " for ch in detail).strip()
        return f"HTTP {response.status}: {clean[:_MAX_DETAIL_CHARS]}"
    return f"HTTP {response.status}"


def _describe(exc: httpx.HTTPError) -> str:
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "network error"
    text = str(exc).strip()
    return f"{kind} ({type(exc).__name__}{': ' + text if text else ''})"
