"""Classification of the board's answers (httpx.MockTransport, no network)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
import pytest

from agent.client import BoardClient, EnrollmentError, Timeouts, parse_retry_after

TOKEN = "gua_agent_s3cr3t_do_not_print"


def client_answering(handler, token: str | None = TOKEN) -> BoardClient:
    return BoardClient(
        "https://board.example/", agent_token=token, transport=httpx.MockTransport(handler)
    )


def reply(status: int, body: object = None, headers: dict[str, str] | None = None):
    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(body, bytes):
            return httpx.Response(status, content=body, headers=headers)
        if body is None:
            return httpx.Response(status, headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return handler


def test_request_shape() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, json={})

    with client_answering(handler) as client:
        answer = client.post_observation(b'{"a": 1}')
    assert answer.kind == "accepted"
    (request,) = seen
    assert str(request.url) == "https://board.example/agent/v1/observations"
    assert request.method == "POST"
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["accept"] == "application/json"
    assert request.content == b'{"a": 1}'


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (202, {"status": "accepted"}, "accepted", "HTTP 202"),
        (202, None, "accepted", "HTTP 202"),
        (202, b"<<not json>>", "accepted", "HTTP 202"),
        (200, {}, "accepted", "HTTP 200"),
        (
            422,
            {"detail": "observedAt is outside the retention window"},
            "rejected",
            "HTTP 422: observedAt is outside the retention window",
        ),
        (422, {"detail": [{"loc": ["body"], "msg": "x"}]}, "rejected", "HTTP 422"),
        (413, b"<html>too large</html>", "rejected", "HTTP 413"),
        (400, {"detail": "bad\nnews\x1b"}, "rejected", "HTTP 400: bad news"),
        (403, {"detail": "host disabled"}, "rejected", "HTTP 403: host disabled"),
        (
            401,
            {"detail": "unknown or revoked token"},
            "unauthorized",
            "HTTP 401: unknown or revoked token",
        ),
        (500, {"detail": "boom"}, "retry", "HTTP 500: boom"),
        (502, b"<html>bad gateway</html>", "retry", "HTTP 502"),
        (503, None, "retry", "HTTP 503"),
        (429, {"detail": "slow down"}, "retry", "HTTP 429: slow down"),
        (301, None, "retry", "HTTP 301"),
    ],
)
def test_answers(status: int, body: object, kind: str, message: str) -> None:
    with client_answering(reply(status, body)) as client:
        answer = client.post_observation(b"{}")
    assert (answer.kind, answer.status, answer.message) == (kind, status, message)


def test_retry_after_passed_on() -> None:
    with client_answering(reply(429, {}, {"Retry-After": "7"})) as client:
        assert client.post_observation(b"{}").retry_after == 7.0
    with client_answering(reply(503, None, {"Retry-After": "2"})) as client:
        assert client.post_observation(b"{}").retry_after == 2.0
    with client_answering(reply(429, {})) as client:
        assert client.post_observation(b"{}").retry_after is None


def test_parse_retry_after() -> None:
    now = datetime(2026, 12, 2, 17, 0, 0, tzinfo=UTC)
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("999999") == 3600.0
    assert parse_retry_after("Wed, 02 Dec 2026 17:00:30 GMT", now) == 30.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None
    assert parse_retry_after("") is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize(
    ("error", "word"),
    [
        (httpx.ConnectError("connection refused"), "network error"),
        (httpx.ReadTimeout("read timed out"), "timed out"),
        (httpx.RemoteProtocolError("server disconnected"), "network error"),
    ],
)
def test_network_errors_are_retryable(error: Exception, word: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    with client_answering(handler) as client:
        answer = client.post_observation(b"{}")
    assert answer.kind == "retry"
    assert answer.status is None
    assert word in answer.message
    assert TOKEN not in answer.message


def test_timeouts_bounded_by_budget() -> None:
    t = Timeouts(connect=5, read=10).bounded(0.5)
    assert (t.connect, t.read, t.write, t.pool) == (0.5, 0.5, 0.5, 0.5)
    t = Timeouts(connect=5, read=10).bounded(None)
    assert (t.connect, t.read) == (5, 10)


CLAIMED = {
    "hostId": "h1",
    "displayName": "gpu01",
    "agentToken": TOKEN,
    "tokenPrefix": "gua_agent_s3",
}


def test_claim_request_and_answer(example) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json=CLAIMED)

    with client_answering(handler, token=None) as client:
        enrollment = client.claim(
            "gua_enroll_abc", hostname="fakehost", agent_version="1.8.0", driver_version=None
        )
    assert (enrollment.host_id, enrollment.display_name, enrollment.token_prefix) == (
        "h1",
        "gpu01",
        "gua_agent_s3",
    )
    assert enrollment.agent_token == TOKEN
    assert TOKEN not in repr(enrollment)
    (request,) = seen
    assert str(request.url) == "https://board.example/agent/v1/enrollments/claim"
    assert "authorization" not in request.headers
    # Byte for byte what the released 1.8.0 agent sent.
    assert request.content == json.dumps(example("claim-request-1.8.0.json")).encode()


def test_claim_sends_driver_version_when_known() -> None:
    bodies: list[object] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(201, json=CLAIMED)

    with client_answering(handler, token=None) as client:
        client.claim("t", hostname="h", agent_version="0.1.0", driver_version="550.54.15")
    assert bodies == [
        {
            "enrollmentToken": "t",
            "hostname": "h",
            "agentVersion": "0.1.0",
            "driverVersion": "550.54.15",
        }
    ]


@pytest.mark.parametrize("missing", ["hostId", "displayName", "agentToken", "tokenPrefix"])
@pytest.mark.parametrize("bad", [None, "", 7])
def test_claim_refuses_incomplete_answer(missing: str, bad: object) -> None:
    answer = dict(CLAIMED)
    if bad is None:
        del answer[missing]
    else:
        answer[missing] = bad
    with (
        client_answering(reply(201, answer), token=None) as client,
        pytest.raises(EnrollmentError, match=missing),
    ):
        client.claim("t", hostname="h", agent_version="0", driver_version=None)


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (
            401,
            {"detail": "enrollment token is not valid"},
            "HTTP 401: enrollment token is not valid",
        ),
        (
            403,
            {"detail": "enrollment token already used"},
            "HTTP 403: enrollment token already used",
        ),
        (500, b"oops", "HTTP 500"),
        (201, b"not json", "no usable 'hostId'"),
        (201, [1, 2], "no usable 'hostId'"),
    ],
)
def test_claim_failures(status: int, body: object, message: str) -> None:
    with (
        client_answering(reply(status, body), token=None) as client,
        pytest.raises(EnrollmentError, match=message),
    ):
        client.claim("gua_enroll_x", hostname="h", agent_version="0", driver_version=None)


def test_claim_network_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    with (
        client_answering(handler, token=None) as client,
        pytest.raises(EnrollmentError, match="could not reach the board"),
    ):
        client.claim("gua_enroll_x", hostname="h", agent_version="0", driver_version=None)
