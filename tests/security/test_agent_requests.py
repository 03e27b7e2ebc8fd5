"""An agent's requests on the served board before any field counts: who is calling (the
Authorization header in every odd spelling), how the body comes (Content-Encoding and
gzip bombs the board never promised to read, Content-Length lies on a raw socket,
chunked bodies that never end, media types and charsets) and JSON that is no
observation (NUL in a key, odd nesting). Each is a 4xx with a string `detail`, nothing
stored, never a 500, and a worker stays small.
"""

from __future__ import annotations

import gzip
import json
import socket
import zlib
from collections.abc import Callable

import pytest

from tests.security.checks import count, raw_exchange, statuses_in, stored
from tests.security.seed import (
    Host,
    Person,
    Tenant,
    claim,
    issue_enrollment,
    observation,
    push,
    unique,
)
from tests.support.live import LiveBoard, measure_peaks
from tests.support.replies import refused


def _with_nul_key(where: str) -> bytes:
    body = observation()
    target = {
        "top": body,
        "host": body["host"],
        "gpu": body["gpus"][0],
        "process": body["gpus"][0]["processes"][0],
    }[where]
    target["evil\u0000key"] = 1
    return json.dumps(body).encode()


@pytest.mark.parametrize("where", ["top", "host", "gpu", "process"])
def test_nul_in_an_unknown_key(board: LiveBoard, host: Host, where: str) -> None:
    before = stored(board, host)
    refused(push(board, host, _with_nul_key(where)), 400, 422)
    assert stored(board, host) == before


def _deep(levels: int) -> bytes:
    body = observation()
    text = json.dumps(body)
    return text[:-1].encode() + b', "deep": ' + b"[" * levels + b"]" * levels + b"}"


ODD_BODIES = {
    "not UTF-8": b'{"schemaVersion": "\xff\xfe"}',
    "deeply nested": _deep(100_000),
    "huge integer": json.dumps(observation())
    .replace('"pid": 1234', '"pid": ' + "9" * 5000)
    .encode(),
    "float where int": json.dumps(observation())
    .replace('"utilPct": 80', '"utilPct": 1e400')
    .encode(),
    "duplicate keys": b'{"gpus": [], "gpus": 5}',
    "a JSON array": b"[]",
    "a JSON string": b'"x"',
    "empty": b"",
    "NUL in a value": json.dumps(observation()).replace('"vm"', '"v\\u0000m"').encode(),
    "lone surrogate": json.dumps(observation()).replace('"vm"', '"\\ud800"').encode(),
}


@pytest.mark.parametrize("case", list(ODD_BODIES))
def test_odd_observation_bodies(board: LiveBoard, host: Host, case: str) -> None:
    before = stored(board, host)
    refused(push(board, host, ODD_BODIES[case]), 400, 413, 422)
    assert stored(board, host) == before


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "application/jsonp",
    ],
)
def test_observation_that_is_not_json_is_415(
    board: LiveBoard, host: Host, content_type: str
) -> None:
    before = stored(board, host)
    body = json.dumps(observation()).encode()
    reply = push(board, host, body, headers={"Content-Type": content_type})
    refused(reply, 415)
    assert stored(board, host) == before


def test_json_with_a_charset_is_json(board: LiveBoard, host: Host) -> None:
    reply = push(
        board, host, observation(), headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert reply.status_code == 202, reply


BOMB_PEAK_MIB = 200


def _auth_forms(host: Host, pat: str, enrollment: str) -> dict[str, tuple[str, bool]]:
    """Authorization values and whether each is the host's own token (accepted)."""
    t = host.token
    return {
        "no scheme": (t, False),
        "two tokens": (f"Bearer {t} {t}", False),
        "two headers' worth joined": (f"Bearer {t}, Bearer {t}", False),
        # RFC 9110: the scheme is case-insensitive; extra spaces before the token are fine.
        "lowercase bearer": (f"bearer {t}", True),
        "uppercase bearer": (f"BEARER {t}", True),
        "two spaces": (f"Bearer  {t}", True),
        "tab": (f"Bearer\t{t}", False),
        "10 KB token": ("Bearer gua_agent_" + "a" * 10_000, False),
        "10 KB after the real one": (f"Bearer {t}{'a' * 10_000}", False),
        "a personal API token": (f"Bearer {pat}", False),
        "an enrollment token": (f"Bearer {enrollment}", False),
        "the token prefix only": (f"Bearer {host.prefix}", False),
        "Basic": ("Basic Z3VhOmd1YQ==", False),
        "scheme only": ("Bearer", False),
        "Token scheme": (f"Token {t}", False),
        "latin-1 bytes": ("Bearer gua_agent_\u00e9\u00ff", False),
    }


def test_authorization_header_forms(board: LiveBoard, scratch: Tenant, host: Host) -> None:
    enrollment = issue_enrollment(board, scratch)
    problems = []
    body = json.dumps(observation()).encode()
    for label, (value, accepted) in _auth_forms(host, scratch.admin.token, enrollment).items():
        headers = {"Authorization": value.encode("latin-1")}
        with board.client() as c:
            replies = [
                board.call(
                    c,
                    "POST",
                    "/agent/v1/observations",
                    content=body,
                    headers={**headers, "Content-Type": "application/json"},
                ),
                board.call(c, "GET", "/agent/v1/archives", headers=headers),
                board.call(c, "DELETE", "/agent/v1/archives?olderThanDays=400", headers=headers),
            ]
        for reply in replies:
            ok = reply.status_code in (200, 202) if accepted else reply.status_code == 401
            if not ok:
                problems.append(f"{label}: {reply}")
            elif not accepted:
                assert reply.headers.get("www-authenticate") == "Bearer", reply.headers
                assert "agent token" in reply.detail(), reply
    assert not problems, "\n".join(problems)
    # The enrollment token was not spent by being shown as a bearer value.
    assert claim(board, enrollment, unique("after-bearer")).host_id


def _gzip_bomb(mib: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b" " * (1024 * 1024)
    parts = [compressor.compress(b'{"a": "')]
    parts += [compressor.compress(chunk) for _ in range(mib)]
    parts.append(compressor.compress(b'"}') + compressor.flush())
    return b"".join(parts)


ENCODED: dict[str, Callable[[bytes], bytes]] = {
    "gzip": lambda body: gzip.compress(body),
    "deflate": lambda body: zlib.compress(body),
    "br": lambda body: b"\x1b\x00\x00\x00" + body[:10],
    "gzip, gzip": lambda body: gzip.compress(gzip.compress(body)),
    "x-unknown": lambda body: body[::-1],
}


@pytest.mark.parametrize("encoding", list(ENCODED))
def test_compressed_observations_are_not_json(board: LiveBoard, host: Host, encoding: str) -> None:
    """The board reads no Content-Encoding: a compressed body is simply not JSON (400)."""
    before = count(board, "SELECT count(*) FROM host_observations")
    body = ENCODED[encoding](json.dumps(observation()).encode())
    reply = push(board, host, body, headers={"Content-Encoding": encoding})
    assert "JSON" in refused(reply, 400, 415), reply
    assert count(board, "SELECT count(*) FROM host_observations") == before


def test_a_gzip_bomb_as_content_encoding_costs_nothing(board: LiveBoard, host: Host) -> None:
    bomb = _gzip_bomb(512)
    assert len(bomb) < 1024 * 1024, len(bomb)
    with measure_peaks(board) as peaks:
        reply = push(board, host, bomb, headers={"Content-Encoding": "gzip"})
        with board.client() as c:
            claimed = board.call(
                c,
                "POST",
                "/agent/v1/enrollments/claim",
                content=_gzip_bomb(64)[: 60 * 1024],
                headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
            )
    refused(reply, 400)
    refused(claimed, 400)
    assert peaks.worst_mib < BOMB_PEAK_MIB, f"a worker grew by {peaks.worst_mib:.0f} MiB"


def test_content_length_lies(board: LiveBoard, host: Host) -> None:
    body = json.dumps(observation()).encode()
    head = (
        b"POST /agent/v1/observations HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer " + host.token.encode() + b"\r\n"
        b"Content-Type: application/json\r\n"
    )
    cases = {
        # Says more than it sends, then stops sending.
        "longer": head + f"Content-Length: {len(body) + 500}\r\n\r\n".encode() + body,
        # Says less: the JSON is cut (400), the rest is a broken second request (400).
        "shorter": head + f"Content-Length: {len(body) // 2}\r\n\r\n".encode() + body,
        "negative": head + b"Content-Length: -1\r\n\r\n" + body,
        "not a number": head + b"Content-Length: 1e3\r\n\r\n" + body,
        "two values": head + f"Content-Length: {len(body)}, 5\r\n\r\n".encode() + body,
        "and chunked": head
        + f"Content-Length: {len(body)}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\n\r\n",
        "bad chunk size": head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body,
        "huge chunk size": head + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{}",
    }
    before = count(board, "SELECT count(*) FROM host_observations")
    problems = []
    for label, request in cases.items():
        answer = raw_exchange(board, request)
        statuses = statuses_in(answer)
        if any(s.startswith(b"5") or s.startswith(b"2") for s in statuses):
            problems.append(f"{label}: {answer[:300]!r}")
    assert not problems, "\n".join(problems)
    assert count(board, "SELECT count(*) FROM host_observations") == before


def _never_ending(board: LiveBoard, head: bytes, trickle: bool) -> bytes:
    """Headers and one chunk; then silence (or a byte a second), until the board answers
    or closes. A generous deadline: the board's own body deadlines are 5 s idle, 12 s whole."""
    import time

    deadline = time.monotonic() + 120
    with socket.create_connection(("127.0.0.1", board.port), timeout=2) as sock:
        sock.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n10\r\n" + b"{" * 16 + b"\r\n")
        answer = b""
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                if trickle:
                    try:
                        sock.sendall(b"1\r\n \r\n")
                    except OSError:
                        break
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
            if b"\r\n\r\n" in answer:
                break
        else:
            raise AssertionError("the board waited for a never-ending body past 120 s")
    return answer


def test_chunked_bodies_that_never_end(board: LiveBoard, host: Host, admin: Person) -> None:
    from concurrent.futures import ThreadPoolExecutor

    agent = b"Authorization: Bearer " + host.token.encode() + b"\r\n"
    heads = {
        "observation": b"POST /agent/v1/observations HTTP/1.1\r\nHost: x\r\n"
        + agent
        + b"Content-Type: application/json\r\n",
        "archive": b"POST /agent/v1/archives?date=2026-01-01&table=gpu_sample HTTP/1.1\r\n"
        b"Host: x\r\n" + agent + b"Content-Type: application/gzip\r\n",
        "claim": b"POST /agent/v1/enrollments/claim HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\n",
        "sign-in form": b"POST /signin HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n",
    }
    before = count(board, "SELECT count(*) FROM host_observations")
    jobs = [(name, trickle) for name in heads for trickle in (False, True)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        answers = list(pool.map(lambda job: _never_ending(board, heads[job[0]], job[1]), jobs))
    problems = []
    for (name, trickle), answer in zip(jobs, answers, strict=True):
        statuses = statuses_in(answer)
        if not statuses or statuses[0] not in (b"400", b"408", b"413"):
            problems.append(f"{name} (trickle={trickle}): {answer[:300]!r}")
    assert not problems, "\n".join(problems)
    assert count(board, "SELECT count(*) FROM host_observations") == before
    # The board still serves.
    assert push(board, host, observation()).status_code == 202
