"""Slow clients are cut off; everyone else is served meanwhile.

Raw sockets trickle a request one byte every half second (headers, or a body after
complete headers), stall mid-body, or connect and say nothing. Every one of them would take
far longer to finish than the board's limits allow (conftest: header 5 s, body idle 5 s,
whole body 12 s); each must be cut (the connection closed, or a 408) before it finishes,
while ordinary requests get their answers. All scenarios run at once, so the module takes
about as long as the longest limit.
"""

from __future__ import annotations

import json
import select
import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from tests.security.conftest import BODY_SECONDS, World
from tests.security.seed import observation
from tests.support.live import LiveBoard

STEP = 0.5
IDLE_SOCKETS = 20


@dataclass
class Outcome:
    cut: bool
    sent: int
    total: int
    answer: bytes

    def __str__(self) -> str:
        state = "cut" if self.cut else "NOT cut"
        return f"{state} after {self.sent} of {self.total} bytes, answer {self.answer[:80]!r}"


def _cut_answer(sock: socket.socket) -> bytes | None:
    """What the board sent if it is done with us (b"" for a close), else None."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return None
    try:
        return sock.recv(65536) or b""
    except (ConnectionResetError, OSError):
        return b""


def trickle(port: int, data: bytes, *, at_once: int = 0, stall_after: int | None = None) -> Outcome:
    """Send `at_once` bytes, then one byte per STEP (or nothing more after `stall_after`)."""
    total = len(data)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sent = 0
        if at_once:
            sock.sendall(data[:at_once])
            sent = at_once
        deadline = time.monotonic() + total * STEP + 30
        while time.monotonic() < deadline:
            answer = _cut_answer(sock)
            if answer is not None and (answer == b"" or not answer.startswith(b"HTTP/1.1 2")):
                return Outcome(sent < total, sent, total, answer)
            if answer is not None:  # answered as if complete: not cut
                return Outcome(False, sent, total, answer)
            if sent < total and (stall_after is None or sent < stall_after):
                try:
                    sock.sendall(data[sent : sent + 1])
                except (BrokenPipeError, ConnectionResetError):
                    return Outcome(True, sent, total, b"")
                sent += 1
            time.sleep(STEP)
        return Outcome(False, sent, total, b"(still open)")


def idle_socket(port: int) -> Outcome:
    """Connect and send nothing, as a Slowloris holding connections does."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            answer = _cut_answer(sock)
            if answer is not None:
                return Outcome(True, 0, 0, answer)
            time.sleep(STEP)
    return Outcome(False, 0, 0, b"(still open)")


def request(method: str, path: str, body: bytes, *headers: str) -> tuple[bytes, bytes]:
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    if body:
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode(), body


@dataclass
class Results:
    outcomes: dict[str, Outcome]
    normal: list[str]


@pytest.fixture(scope="module")
def results(board: LiveBoard, world: World) -> Results:
    port = board.port
    agent = f"Authorization: Bearer {world.a.hosts[0].token}"
    padded = [f"X-Pad-{i}: {'a' * 20}" for i in range(3)]
    claim = json.dumps({"enrollmentToken": "gua_enroll_" + "0" * 60, "hostname": "slow"})
    push = json.dumps(observation()).encode()
    signin = b"email=slow%40example.com&password=slowly-slowly&csrf_token=x&next=%2F"
    head_get, _ = request("GET", "/healthz", b"", *padded)
    scenarios = {
        "headers trickled": (head_get, {}),
        "claim body trickled": (
            request(
                "POST",
                "/agent/v1/enrollments/claim",
                claim.encode() * 2,
                "Content-Type: application/json",
            ),
            {},
        ),
        "observation body trickled": (
            request(
                "POST",
                "/agent/v1/observations",
                push[:400],
                agent,
                "Content-Type: application/json",
            ),
            {},
        ),
        "sign-in body trickled": (
            request(
                "POST", "/signin", signin * 3, "Content-Type: application/x-www-form-urlencoded"
            ),
            {},
        ),
        "body stalled": (
            request(
                "POST",
                "/agent/v1/enrollments/claim",
                claim.encode(),
                "Content-Type: application/json",
            ),
            {"stall": 10},
        ),
    }
    with ThreadPoolExecutor(len(scenarios) + IDLE_SOCKETS) as pool:
        running: dict[str, Future[Outcome]] = {}
        for name, (parts, options) in scenarios.items():
            if isinstance(parts, tuple):
                head, body = parts
                data, at_once = head + body, len(head)
            else:
                data, at_once = parts, 0
            if name == "headers trickled":
                at_once = 0
            stall = options.get("stall")
            running[name] = pool.submit(
                trickle,
                port,
                data,
                at_once=at_once,
                stall_after=None if stall is None else at_once + stall,
            )
        for i in range(IDLE_SOCKETS):
            running[f"idle connection {i}"] = pool.submit(idle_socket, port)
        time.sleep(2)
        normal = []
        for _ in range(3):  # ordinary traffic while the slow ones hang on
            with board.client(world.a.admin.token) as c:
                health = board.call(c, "GET", "/healthz")
                hosts = board.call(c, "GET", f"/api/v1/workspaces/{world.a.slug}/hosts")
            normal += [f"healthz {health.status_code}", f"hosts {hosts.status_code}"]
            time.sleep(1)
        outcomes = {name: f.result() for name, f in running.items()}
    return Results(outcomes, normal)


@pytest.mark.parametrize(
    "scenario",
    [
        "headers trickled",
        "claim body trickled",
        "observation body trickled",
        "sign-in body trickled",
        "body stalled",
    ],
)
def test_slow_request_is_cut_off(results: Results, scenario: str) -> None:
    outcome = results.outcomes[scenario]
    assert outcome.cut, f"{scenario}: {outcome}"
    if outcome.answer:
        assert outcome.answer.startswith((b"HTTP/1.1 408", b"HTTP/1.1 4")), outcome


def test_idle_connections_are_closed(results: Results) -> None:
    held = {n: str(o) for n, o in results.outcomes.items() if n.startswith("idle") and not o.cut}
    assert not held, f"connections that never sent a byte were kept open: {held}"


def test_others_are_served_meanwhile(results: Results) -> None:
    assert results.normal, results
    assert all(line.endswith("200") for line in results.normal), results.normal


def test_a_whole_body_in_time_is_accepted(board: LiveBoard, world: World) -> None:
    """The body limits bound slowness, not size: a normal upload within them works."""
    assert BODY_SECONDS > 1
    body = observation()
    with board.client(world.a.hosts[0].token) as c:
        reply = board.call(
            c,
            "POST",
            "/agent/v1/observations",
            content=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
    assert reply.status_code == 202, reply
