"""The agent API's validation, in process: every bad snapshot, claim, token, media type
or body gets a clear string detail and changes nothing.

The same input against the served board (two workers, raw sockets): tests/security's
test_agent_requests.py, test_agent_observations.py and test_agent_claims.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests.board.builders import enroll, example, make_tenant, retimed
from tests.board.db import scalar


def _body(**changes: Any) -> dict[str, Any]:
    body = retimed(example("observation-1.8.0-fake.json"))
    for path, value in changes.items():
        target: Any = body
        *parents, leaf = path.split("__")
        for p in parents:
            target = target[int(p)] if p.isdigit() else target[p]
        if value is _DELETE:
            del target[leaf]
        else:
            target[leaf] = value
    return body


_DELETE = object()
NOW = datetime.now(UTC)


def _wide_gpu(keys: int) -> dict[str, Any]:
    body = _body()
    body["gpus"][0].update({f"k{i}": 0 for i in range(keys)})
    return body


def _json_headers(host: dict[str, Any]) -> dict[str, str]:
    """What every released agent sends with a push."""
    return {"Authorization": f"Bearer {host['agentToken']}", "Content-Type": "application/json"}


BAD_BODIES = {
    "wrong type": (_body(gpus__0__utilPct="80"), 422, "utilPct"),
    "float for int": (_body(gpus__0__memoryUsedMb=1.5), 422, "memoryUsedMb"),
    "bool for int": (_body(gpus__0__index=True), 422, "index"),
    "unknown top-level field": (_body(extra=1), 422, "extra"),
    "unknown nested field": (_body(gpus__0__processes__0__cmdline="python x"), 422, "cmdline"),
    "wrong schemaVersion": (_body(schemaVersion="availability.snapshot.v2"), 422, "schemaVersion"),
    "utilPct 101": (_body(gpus__0__utilPct=101), 422, "utilPct"),
    "used above total": (_body(gpus__2__memoryUsedMb=50000), 422, "memoryUsedMb"),
    "partial without errors": (_body(collectionStatus="partial"), 422, "errors"),
    "ok with errors": (_body(errors=["process_list_unavailable"]), 422, "errors"),
    "unknown status": (_body(collectionStatus="fine"), 422, "collectionStatus"),
    "missing host": (_body(host=_DELETE), 422, "host"),
    "timestamp without offset": (_body(observedAt="2026-12-02T17:42:36.516146"), 422, "offset"),
    "not a timestamp": (_body(observedAt="yesterday"), 422, "observedAt"),
    "far in the future": (
        _body(observedAt=(NOW + timedelta(hours=6)).isoformat()),  # ahead all run long
        422,
        "ahead",
    ),
    "older than retention": (
        _body(observedAt=(NOW - timedelta(days=40)).isoformat()),
        422,
        "retention",
    ),
    "negative pid": (_body(gpus__0__processes__0__pid=0), 422, "pid"),
    "empty uuid": (_body(gpus__0__uuid=""), 422, "uuid"),
    "string too long": (_body(host__hostname="h" * 300), 422, "hostname"),
    "duplicate gpu uuid": (_body(gpus__1__uuid="GPU-0"), 422, "unique"),
    "too many gpus": (
        _body(
            gpus=[
                dict(example("observation-1.8.0-fake.json")["gpus"][2], uuid=f"G{i}", index=i)
                for i in range(65)
            ]
        ),
        422,
        "gpus",
    ),
    "gpus not a list": (_body(gpus={}), 422, "gpus"),
    # One error per unknown key used to cost ~1 KB of a worker each (60,000: ~70 MiB).
    "an object of 60,000 keys": (_body(**{f"k{i}": 0 for i in range(60_000)}), 422, "64 keys"),
    "a GPU of 6,000 keys": (_wide_gpu(6_000), 422, "64 keys"),
    # PostgreSQL text cannot hold NUL: refused up front, not a failed write.
    "NUL in a process name": (_body(gpus__0__processes__0__name="py\u0000thon"), 422, "NUL"),
    "NUL in the hostname": (_body(host__hostname="vm\u0000"), 422, "hostname"),
    "temperature beyond smallint": (_body(gpus__0__temperatureC=40000), 422, "temperatureC"),
    # Error codes are joined by \x1f on their way to PostgreSQL: one would become two.
    "unit separator in an error code": (
        _body(collectionStatus="partial", errors=["process_list\u001funavailable"]),
        422,
        "errors.0",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
async def test_bad_snapshot_changes_nothing(app, client, case: str) -> None:
    body, status, mention = BAD_BODIES[case]
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    r = await client.post(
        "/agent/v1/observations",
        content=json.dumps(body),
        headers={
            "Authorization": f"Bearer {host['agentToken']}",
            "Content-Type": "application/json",
        },
    )
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str)
    assert detail
    assert mention.lower() in detail.lower()
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 0
    assert await scalar(app, "SELECT count(*) FROM gpu_samples") == 0
    assert await scalar(app, "SELECT count(*) FROM gpu_hour_rollups") == 0
    shown = (
        await client.get(f"/api/v1/workspaces/acme/hosts/{host['hostId']}", headers=tenant.auth())
    ).json()
    assert shown["freshness"] == "never"
    assert sum(p["count"] for p in shown["rejectedPushes"]) == 1
    assert shown["rejectedPushes"][0]["lastDetail"] == detail


async def test_malformed_json(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    r = await client.post(
        "/agent/v1/observations",
        content=b'{"schemaVersion": ',
        headers=_json_headers(host),
    )
    assert r.status_code == 400
    assert r.json()["detail"] == "Request body is not valid JSON."
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 0
    assert await scalar(app, "SELECT reason FROM host_rejections") == "invalid_json"


async def test_oversized_body_is_refused_before_parsing(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    huge = b"{" + b" " * (1024 * 1024 + 1) + b"}"
    r = await client.post("/agent/v1/observations", content=huge, headers=_json_headers(host))
    assert r.status_code == 413
    assert isinstance(r.json()["detail"], str)

    async def chunks():  # no Content-Length: the limit applies while streaming
        for _ in range(20):
            yield b" " * 65536

    r = await client.post("/agent/v1/observations", content=chunks(), headers=_json_headers(host))
    assert r.status_code == 413
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 0
    assert await scalar(app, "SELECT sum(count) FROM host_rejections") == 2


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer gua_agent_nope_nope", "Basic abc", "Bearer gua_pat_x"],
)
async def test_missing_or_wrong_agent_token(app, client, authorization) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    r = await client.post(
        "/agent/v1/observations",
        json=retimed(example("observation-1.8.0-fake.json")),
        headers=headers,
    )
    assert r.status_code == 401
    assert isinstance(r.json()["detail"], str)
    if authorization:
        assert authorization.split(" ")[-1] not in r.json()["detail"]
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 0


async def test_pat_is_not_an_agent_token(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    r = await client.post(
        "/agent/v1/observations",
        json=retimed(example("observation-1.8.0-fake.json")),
        headers=tenant.auth(),
    )
    assert r.status_code == 401


# -- Content-Type -------------------------------------------------------------------------

MEDIA_TYPES_REFUSED = [None, "text/plain", "application/x-www-form-urlencoded", "application/jsonx"]


@pytest.mark.parametrize("content_type", MEDIA_TYPES_REFUSED)
async def test_a_push_that_is_not_json_is_415(app, client, content_type) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    headers = {"Authorization": f"Bearer {host['agentToken']}"}
    if content_type:
        headers["Content-Type"] = content_type
    body = json.dumps(retimed(example("observation-1.8.0-fake.json")))
    r = await client.post("/agent/v1/observations", content=body, headers=headers)
    assert r.status_code == 415, r.text
    assert "application/json" in r.json()["detail"]
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 0
    assert await scalar(app, "SELECT reason FROM host_rejections") == "unsupported_media_type"


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"]
)
async def test_json_with_parameters_is_accepted(app, client, content_type) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    r = await client.post(
        "/agent/v1/observations",
        content=json.dumps(retimed(example("observation-1.8.0-fake.json"))),
        headers={"Authorization": f"Bearer {host['agentToken']}", "Content-Type": content_type},
    )
    assert r.status_code == 202, r.text


async def test_a_bad_token_is_401_before_the_media_type(app, client) -> None:
    r = await client.post(
        "/agent/v1/observations",
        content=b"x",
        headers={"Authorization": "Bearer gua_agent_nope_nope", "Content-Type": "text/plain"},
    )
    assert r.status_code == 401


@pytest.mark.parametrize("content_type", MEDIA_TYPES_REFUSED)
async def test_a_claim_that_is_not_json_is_415(app, client, content_type) -> None:
    tenant = await make_tenant(app, "acme")
    issued = await client.post(
        "/api/v1/workspaces/acme/enrollment-tokens", json={}, headers=tenant.auth()
    )
    body = json.dumps({"enrollmentToken": issued.json()["enrollmentToken"], "hostname": "vm"})
    headers = {"Content-Type": content_type} if content_type else {}
    r = await client.post("/agent/v1/enrollments/claim", content=body, headers=headers)
    assert r.status_code == 415, r.text
    assert isinstance(r.json()["detail"], str)
    assert await scalar(app, "SELECT count(*) FROM hosts") == 0
    # The token was not used up.
    r = await client.post("/agent/v1/enrollments/claim", content=body, headers=_JSON)
    assert r.status_code == 201


_JSON = {"Content-Type": "application/json"}


# -- what an attacker might send --------------------------------------------------------


def _raw(text: str) -> bytes:
    """A body from JSON text with a placeholder for a valid observation's fields."""
    fields = json.dumps(retimed(example("observation-1.8.0-fake.json")))[1:-1]
    return text.replace("FIELDS", fields).encode()


DEEP = 100_000
HOSTILE_BODIES: dict[str, tuple[bytes, tuple[int, ...]]] = {
    "NUL in an unknown key": (_raw('{FIELDS, "a\\u0000b": 1}'), (422,)),
    "NUL in an unknown nested key": (
        _raw("{FIELDS}").replace(b'"index"', b'"x\\u0000y": 1, "index"', 1),
        (422,),
    ),
    "a 100,000-character unknown key": (_raw('{FIELDS, "' + "k" * 100_000 + '": 1}'), (422,)),
    "thousands of unknown keys": (
        _raw("{FIELDS, " + ", ".join(f'"k{i}\\u0000": {i}' for i in range(5000)) + "}"),
        (422,),
    ),
    "lone surrogate in an unknown key": (_raw('{FIELDS, "\\ud800": 1}'), (400, 422)),
    "lone surrogate in the hostname": (
        _raw("{FIELDS}").replace(b'"hostname": "', b'"hostname": "\\udfff', 1),
        (400, 422),
    ),
    "1e400 for an integer": (
        _raw("{FIELDS}").replace(b'"utilPct": 2', b'"utilPct": 1e400', 1),
        (422,),
    ),
    "2**64 for an integer": (
        _raw("{FIELDS}").replace(b'"utilPct": 2', b'"utilPct": 18446744073709551616', 1),
        (422,),
    ),
    "a 5,000-digit integer": (
        _raw("{FIELDS}").replace(b'"utilPct": 2', b'"utilPct": ' + b"9" * 5000, 1),
        (400, 422),
    ),
    "NaN": (_raw("{FIELDS}").replace(b'"utilPct": 2', b'"utilPct": NaN', 1), (400, 422)),
    "deep nesting in an unknown key": (
        _raw('{FIELDS, "deep": ' + "[" * DEEP + "]" * DEEP + "}"),
        (400, 422),
    ),
    "deep nesting of objects": (
        _raw('{FIELDS, "deep": ' + '{"a":' * DEEP + "1" + "}" * DEEP + "}"),
        (400, 422),
    ),
    "an array": (b"[1, 2, 3]", (422,)),
    "a string": (b'"hello"', (422,)),
    "null": (b"null", (422,)),
    "a number": (b"42", (422,)),
    "empty": (b"", (400,)),
    "invalid UTF-8": (_raw("{FIELDS}").replace(b'"vm', b'"\xff\xfe', 1), (400, 422)),
    "UTF-8 BOM": (b"\xef\xbb\xbf" + _raw("{FIELDS}"), (400, 422)),
    "trailing data": (_raw("{FIELDS} {}"), (400,)),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_BODIES))
async def test_hostile_body_is_a_clear_4xx(app, client, case: str) -> None:
    body, statuses = HOSTILE_BODIES[case]
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    r = await client.post("/agent/v1/observations", content=body, headers=_json_headers(host))
    assert r.status_code in statuses, r.text[:500]
    detail = r.json()["detail"]
    assert isinstance(detail, str)
    assert 0 < len(detail) <= 500
    assert "\x00" not in detail
    assert len(r.content) < 20_000  # the answer does not echo the body
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 0
    assert await scalar(app, "SELECT count(*) FROM gpus") == 0
    stored = await scalar(app, "SELECT last_detail FROM host_rejections")
    assert stored == detail


async def test_duplicate_keys_take_the_last_value(app, client) -> None:
    """Valid JSON, if odd: the last copy of a key wins, as in Python's json module."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    body = _raw('{FIELDS, "collectionStatus": "fine", "collectionStatus": "ok"}')
    r = await client.post("/agent/v1/observations", content=body, headers=_json_headers(host))
    assert r.status_code == 202, r.text
    body = _raw('{FIELDS, "collectionStatus": "ok", "collectionStatus": "fine"}')
    r = await client.post("/agent/v1/observations", content=body, headers=_json_headers(host))
    assert r.status_code == 422
    assert "collectionStatus" in r.json()["detail"]


ODD_TIMES = {
    "year 1, positive offset": "0001-01-01T00:00:00+05:00",
    "year 1, negative offset": "0001-01-01T00:00:00-05:00",
    "year 1 in UTC": "0001-01-01T00:00:00+00:00",
    "year 9999, negative offset": "9999-12-31T23:59:59-05:00",
    "year 9999, positive offset": "9999-12-31T23:59:59+05:00",
    "offset of almost a day": (NOW + timedelta(hours=23)).strftime("%Y-%m-%dT%H:%M:%S-23:59"),
    "offset beyond a day": "2026-01-01T00:00:00+24:00",
    "seconds in the offset": "2026-01-01T00:00:00+05:30:15",
    "leap second": "2026-12-31T23:59:60+00:00",
    "month 13": "2026-13-01T00:00:00+00:00",
    "Z suffix far ahead": "2099-01-01T00:00:00Z",
    "epoch number as text": "1767225600",
}


@pytest.mark.parametrize("case", sorted(ODD_TIMES))
async def test_odd_observed_at_is_a_422(app, client, case: str) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    body = retimed(example("observation-1.8.0-fake.json"))
    body["observedAt"] = ODD_TIMES[case]
    r = await client.post(
        "/agent/v1/observations", content=json.dumps(body), headers=_json_headers(host)
    )
    assert r.status_code == 422, r.text
    assert isinstance(r.json()["detail"], str)
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 0


async def test_an_observed_at_in_an_odd_but_valid_offset_is_stored(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    body = retimed(example("observation-1.8.0-fake.json"))
    at = datetime.now(UTC).astimezone(timezone(timedelta(hours=-23, minutes=-59)))
    body["observedAt"] = at.isoformat()
    r = await client.post(
        "/agent/v1/observations", content=json.dumps(body), headers=_json_headers(host)
    )
    assert r.status_code == 202, r.text
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 1


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer gua_agent_" + "a" * 100_000,
        "Bearer " + "x" * 100_000,
        "Bearer gua_agent_\u00ff\u00fe".encode("latin-1"),
        "bearer  gua_agent_x  ",
    ],
)
async def test_hostile_authorization_is_401(app, client, authorization) -> None:
    r = await client.post(
        "/agent/v1/observations",
        content=json.dumps(retimed(example("observation-1.8.0-fake.json"))),
        headers={"Authorization": authorization, "Content-Type": "application/json"},
    )
    assert r.status_code == 401
    assert len(r.json()["detail"]) < 200
    r = await client.get("/agent/v1/archives", headers={"Authorization": authorization})
    assert r.status_code == 401


CLAIMS = {
    "NUL in the token": ({"enrollmentToken": "gua_enroll_\u0000"}, 401),
    "NUL in the hostname": ({"enrollmentToken": "gua_enroll_x", "hostname": "a\u0000"}, 422),
    "NUL in an unknown key": ({"enrollmentToken": "gua_enroll_x", "a\u0000": 1}, 422),
    "10,000-character token": ({"enrollmentToken": "t" * 10_000}, 422),
    "10,000-character hostname": (
        {"enrollmentToken": "gua_enroll_x", "hostname": "h" * 10_000},
        422,
    ),
    "10,000-character agent version": (
        {"enrollmentToken": "gua_enroll_x", "agentVersion": "1" * 10_000},
        422,
    ),
    "10,000-character unknown key": ({"enrollmentToken": "gua_enroll_x", "k" * 10_000: 1}, 422),
    "token not a string": ({"enrollmentToken": 12345}, 422),
    "an array": ([{"enrollmentToken": "gua_enroll_x"}], 422),
    "6,000 unknown keys": (
        {"enrollmentToken": "gua_enroll_x"} | {f"{i}": 0 for i in range(6_000)},
        422,
    ),
}


@pytest.mark.parametrize("case", sorted(CLAIMS))
async def test_hostile_claim_is_a_clear_4xx(app, client, case: str) -> None:
    body, status = CLAIMS[case]
    r = await client.post("/agent/v1/enrollments/claim", content=json.dumps(body), headers=_JSON)
    assert r.status_code == status, r.text[:500]
    detail = r.json()["detail"]
    assert isinstance(detail, str)
    assert 0 < len(detail) <= 500
    assert len(r.content) < 20_000
    assert await scalar(app, "SELECT count(*) FROM hosts") == 0


async def test_claim_with_invalid_utf8_is_400(app, client) -> None:
    r = await client.post(
        "/agent/v1/enrollments/claim", content=b'{"enrollmentToken": "\xff"}', headers=_JSON
    )
    assert r.status_code in (400, 422)
    assert isinstance(r.json()["detail"], str)


async def test_a_422_lists_a_few_of_many_problems(app, client) -> None:
    """100 unknown keys (too few to be refused unparsed): all counted, 20 listed."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    r = await client.post(
        "/agent/v1/observations", content=json.dumps(_wide_gpu(100)), headers=_json_headers(host)
    )
    assert r.status_code == 422, r.text
    assert "(and 99 more problem(s))" in r.json()["detail"]
    assert len(r.json()["errors"]) == 20
