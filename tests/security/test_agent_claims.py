"""Enrollment claims under a hostile agent, on the served board: bodies that are no
claim, tokens expired, revoked or used, hostile host names, and concurrent claims. A
refusal is a 4xx with a string `detail` that spends no token and makes no host; one
token makes one host, across workers.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.security.checks import host_view
from tests.security.conftest import db
from tests.security.seed import (
    Tenant,
    claim,
    enroll,
    issue_enrollment,
    observation,
    push,
    unique,
)
from tests.support.live import LiveBoard
from tests.support.replies import Reply, refused


def test_claim_that_is_not_json_is_415(board: LiveBoard, scratch: Tenant) -> None:
    from tests.security.seed import issue_enrollment

    token = issue_enrollment(board, scratch)
    body = json.dumps({"enrollmentToken": token, "hostname": "plain"}).encode()
    with board.client() as c:
        reply = board.call(
            c,
            "POST",
            "/agent/v1/enrollments/claim",
            content=body,
            headers={"Content-Type": "text/plain"},
        )
    refused(reply, 415)
    # The refused claim did not spend the token.
    with board.client() as c:
        again = board.call(c, "POST", "/agent/v1/enrollments/claim", json=json.loads(body))
    assert again.status_code == 201, again
    board.remember(again.json()["agentToken"])


def test_one_enrollment_token_one_host_across_workers(board: LiveBoard, scratch: Tenant) -> None:
    """Many claims of one token at once, spread over both workers: exactly one wins."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.security.seed import issue_enrollment

    token = issue_enrollment(board, scratch)

    def claim_once(i: int) -> Reply:
        with board.client() as c:
            return board.call(
                c,
                "POST",
                "/agent/v1/enrollments/claim",
                json={"enrollmentToken": token, "hostname": f"race-{i}"},
            )

    with ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(claim_once, range(32)))
    winners = [r for r in replies if r.status_code == 201]
    for r in winners:
        board.remember(r.json()["agentToken"])
    assert len(winners) == 1, [r.status_code for r in replies]
    assert {r.status_code for r in replies} <= {201, 401}, [r.status_code for r in replies]


CLAIM = "/agent/v1/enrollments/claim"


def _claim(board: LiveBoard, body: dict[str, Any] | bytes) -> Reply:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    with board.client() as c:
        return board.call(
            c, "POST", CLAIM, content=content, headers={"Content-Type": "application/json"}
        )


def _hosts_count(board: LiveBoard, tenant: Tenant) -> object:
    url = board.env["GUA_BOARD_DATABASE_URL"]
    return db(
        url,
        "SELECT count(*) FROM hosts h JOIN workspaces w ON w.id = h.workspace_id WHERE w.slug = %s",
        tenant.slug,
    )


def _token_state(board: LiveBoard, tenant: Tenant, token: str) -> str:
    prefix = "_".join(token.split("_")[:3])
    with board.client(tenant.admin.token) as c:
        reply = board.call(c, "GET", f"/api/v1/workspaces/{tenant.slug}/enrollment-tokens")
    for t in reply.json()["enrollmentTokens"]:
        if t["tokenPrefix"] == prefix:
            return str(t["state"])
    raise LookupError(prefix)


def test_an_expired_token_is_refused_like_an_unknown_one(board: LiveBoard, other: Tenant) -> None:
    with board.client(other.admin.token) as c:
        reply = board.call(
            c,
            "POST",
            f"/api/v1/workspaces/{other.slug}/enrollment-tokens",
            json={"expiresInHours": 0.0003},  # about a second
        )
    assert reply.status_code == 201, reply
    token = reply.json()["enrollmentToken"]
    board.remember(token)
    deadline = time.monotonic() + 60
    while _token_state(board, other, token) != "expired":
        assert time.monotonic() < deadline, "the token never expired"
        time.sleep(0.5)
    before = _hosts_count(board, other)
    expired = refused(_claim(board, {"enrollmentToken": token, "hostname": "late"}), 401)
    unknown = refused(_claim(board, {"enrollmentToken": token[:-4] + "AAAA"}), 401)
    assert expired == unknown
    assert _hosts_count(board, other) == before
    assert _token_state(board, other, token) == "expired"


def test_a_revoked_or_used_token_is_refused(board: LiveBoard, other: Tenant) -> None:
    revoked = issue_enrollment(board, other)
    prefix = "_".join(revoked.split("_")[:3])
    with board.client(other.admin.token) as c:
        reply = board.call(
            c, "DELETE", f"/api/v1/workspaces/{other.slug}/enrollment-tokens/{prefix}"
        )
    assert reply.status_code == 200, reply
    used = issue_enrollment(board, other)
    claim(board, used, unique("first"))
    before = _hosts_count(board, other)
    for token in (revoked, used, f"  {used}\n", used.upper()):
        refused(_claim(board, {"enrollmentToken": token, "hostname": "again"}), 401)
    assert _hosts_count(board, other) == before
    assert _token_state(board, other, revoked) == "revoked"


def test_a_refused_claim_body_spends_no_token(board: LiveBoard, other: Tenant) -> None:
    token = issue_enrollment(board, other)
    before = _hosts_count(board, other)
    bad: list[dict[str, Any] | bytes] = [
        {"enrollmentToken": token, "hostname": "a\u0000b"},
        {"enrollmentToken": token, "hostname": "h" * 256},
        {"enrollmentToken": token, "agentVersion": "v" * 65},
        {"enrollmentToken": token, "hostname": 7},
        {"enrollmentToken": token, "extra": 1},
        {"enrollmentToken": token, "hostname": None, "driverVersion": ["x"]},
        json.dumps({"enrollmentToken": token}).encode().replace(b"}", b', "hostname": "\\ud800"}'),
        json.dumps({"enrollmentToken": token}).encode() + b"{}",
    ]
    for body in bad:
        refused(_claim(board, body), 400, 422)
    assert _hosts_count(board, other) == before
    assert _token_state(board, other, token) == "active"
    won = _claim(board, {"enrollmentToken": token})
    assert won.status_code == 201, won
    board.remember(won.json()["agentToken"])


@pytest.mark.parametrize(
    ("hostname", "shown"),
    [
        ("   ", None),
        ("\u202egnp.exe", "\u202egnp.exe"),
        ("<script>alert(1)</script>", "<script>alert(1)</script>"),
        ('=HYPERLINK("http://x")', '=HYPERLINK("http://x")'),
        ("  padded  ", "padded"),
        ("\U0001f600" * 255, "\U0001f600" * 255),
    ],
)
def test_hostile_claim_names_are_kept_as_text(
    board: LiveBoard, other: Tenant, hostname: str, shown: str | None
) -> None:
    token = issue_enrollment(board, other)
    reply = _claim(board, {"enrollmentToken": token, "hostname": hostname})
    assert reply.status_code == 201, reply
    answer = reply.json()
    board.remember(answer["agentToken"])
    assert all(isinstance(answer[k], str) and answer[k] for k in answer), answer
    if shown is None:
        assert answer["displayName"].startswith("host-"), answer
    else:
        assert answer["displayName"] == shown, answer


def test_a_claim_named_like_an_existing_host_is_a_host_of_its_own(
    board: LiveBoard, other: Tenant
) -> None:
    first = enroll(board, other, unique("twin"))
    second = claim(board, issue_enrollment(board, other), first.display_name)
    assert second.display_name == first.display_name
    assert second.host_id != first.host_id
    assert second.prefix != first.prefix
    assert push(board, second, observation()).status_code == 202
    assert host_view(board, other, first)["lastSeenAt"] is None


def test_concurrent_claims_with_different_names_make_one_host(
    board: LiveBoard, other: Tenant
) -> None:
    token = issue_enrollment(board, other)
    before = _hosts_count(board, other)

    def one(i: int) -> Reply:
        return _claim(board, {"enrollmentToken": f" {token} " if i % 2 else token})

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(one, range(16)))
    won = [r for r in replies if r.status_code == 201]
    for r in won:
        board.remember(r.json()["agentToken"])
    assert len(won) == 1, [r.status_code for r in replies]
    for r in replies:
        if r.status_code != 201:
            refused(r, 401)
    assert _hosts_count(board, other) == int(str(before)) + 1


def _claim_bodies(token: str) -> dict[str, bytes]:
    ok = json.dumps({"enrollmentToken": token, "hostname": "h"})
    return {
        "NaN": b'{"enrollmentToken": NaN}',
        "Infinity hostname": ok.replace('"h"', "Infinity").encode(),
        "huge number": ok.replace('"h"', "9" * 5000).encode(),
        "deep nesting": ok[:-1].encode() + b', "x": ' + b"[" * 30_000 + b"]" * 30_000 + b"}",
        "token twice, the second bogus": ok.replace(
            '"hostname"', '"enrollmentToken": "gua_enroll_00000000_x", "hostname"'
        ).encode(),
        "token as a number": b'{"enrollmentToken": 12345}',
        "token as a list": json.dumps({"enrollmentToken": [token]}).encode(),
        "NUL in hostname": ok.replace('"h"', '"a\\u0000b"').encode(),
        "lone surrogate hostname": ok.replace('"h"', '"\\udc00"').encode(),
        "10 KB hostname": ok.replace('"h"', json.dumps("h" * 10_000)).encode(),
        "BOM before the JSON": b"\xef\xbb\xbf" + ok.encode(),
        "UTF-16": ok.encode("utf-16"),
        "trailing garbage": ok.encode() + b"}{",
        "a JSON null": b"null",
        "10 KB token": json.dumps({"enrollmentToken": "gua_enroll_" + "a" * 10_000}).encode(),
    }


def test_odd_claim_bodies(board: LiveBoard, scratch: Tenant) -> None:
    token = issue_enrollment(board, scratch)
    problems = []
    with board.client() as c:
        for label, body in _claim_bodies(token).items():
            reply = board.call(
                c,
                "POST",
                "/agent/v1/enrollments/claim",
                content=body,
                headers={"Content-Type": "application/json"},
            )
            if reply.status_code == 201:  # only a body naming the token once may win
                board.remember(reply.json()["agentToken"])
                problems.append(f"{label}: claimed")
            elif reply.status_code not in (400, 401, 413, 422):
                problems.append(f"{label}: {reply}")
            else:
                reply.detail()
    assert not problems, "\n".join(problems)
    # None of them spent the token.
    assert claim(board, token, unique("after-odd-claims")).host_id
