"""Hostile or broken agent input: a 4xx with a string `detail`, nothing stored, never a 500.

Also bounded work per upload: an archive that decompresses far beyond the limit is refused
with 413 while the worker stays small, one with too many rows is refused, and a host cannot
mint GPU identities beyond its workspace's `maxGpusPerHost`.
"""

from __future__ import annotations

import json
import zlib
from datetime import timedelta

import pytest

from tests.security.conftest import ARCHIVE_MAX_ROWS, db
from tests.security.seed import (
    GPU_SAMPLE,
    Host,
    Tenant,
    enroll,
    gz_csv,
    observation,
    push,
    unique,
    upload_archive,
    yesterday,
)
from tests.support.live import LiveBoard, measure_peaks
from tests.support.replies import Reply

BOMB_PEAK_MIB = 200


@pytest.fixture
def host(board: LiveBoard, scratch: Tenant) -> Host:
    return enroll(board, scratch, unique("agent-input"))


def stored(board: LiveBoard, host: Host) -> tuple[object, object, object]:
    """(observations, GPUs, archive objects) the board keeps for the host."""
    url = board.env["GUA_BOARD_DATABASE_URL"]
    where = (
        "FROM {} x JOIN hosts h ON h.workspace_id = x.workspace_id AND h.id = x.host_id "
        "WHERE h.public_id = %s::uuid"
    )
    return (
        db(url, "SELECT count(*) " + where.format("host_observations"), host.host_id),
        db(url, "SELECT count(*) " + where.format("gpus"), host.host_id),
        db(url, "SELECT count(*) " + where.format("archive_objects"), host.host_id),
    )


def refused(reply: Reply, *statuses: int) -> str:
    assert reply.status_code in statuses, reply
    return reply.detail()


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


def test_json_with_a_charset_is_json(board: LiveBoard, host: Host) -> None:
    reply = push(
        board, host, observation(), headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert reply.status_code == 202, reply


@pytest.mark.parametrize(
    "query",
    [
        "date=9999-12-31&table=gpu_sample",
        "date=0001-01-01&table=gpu_sample",
        "date=0000-01-01&table=gpu_sample",
        "date=99999-01-01&table=gpu_sample",
        "date=2026-13-45&table=gpu_sample",
        "date=%00&table=gpu_sample",
        "date=2026-12-01&table=gpu_sample%00",
        "date=2026-12-01&table=../../etc/passwd",
        "date=../../../tmp&table=gpu_sample",
        "date=_full&table=..%2F..%2Fx",
        f"date={'9' * 5000}&table=gpu_sample",
    ],
)
def test_archive_upload_bad_target(board: LiveBoard, host: Host, query: str) -> None:
    day = yesterday().date().isoformat()
    body = gz_csv(GPU_SAMPLE, [[f"{day}T01:00:00+00:00", "GPU-0", 5, "", "", 0, 1, 1, 1]])
    before = stored(board, host)
    with board.client(host.token) as c:
        reply = board.call(
            c,
            "POST",
            f"/agent/v1/archives?{query}",
            content=body,
            headers={"Content-Type": "application/gzip"},
        )
    refused(reply, 400, 404, 422)
    assert stored(board, host) == before


@pytest.mark.parametrize(
    "days",
    ["999999999999999999999", "3650000", "100000000", "-1", "1e9", "0x10", "%00", " 1", "１"],
)
def test_archive_prune_bad_days(board: LiveBoard, host: Host, days: str) -> None:
    with board.client(host.token) as c:
        reply = board.call(c, "DELETE", f"/agent/v1/archives?olderThanDays={days}")
    # A huge but well-formed number may also be read as "everything older": not a 500.
    if reply.status_code == 200:
        assert days.isdigit(), reply
        return
    refused(reply, 400, 422)


def _bomb_of_rows(filler_mib: int) -> bytes:
    """Distinct rows past the uncompressed limit, then repeats: ~1,000:1 for the filler."""
    start = yesterday()
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [compressor.compress((",".join(GPU_SAMPLE) + "\r\n").encode())]
    rows = [
        f"{(start + timedelta(seconds=i // 2)).isoformat()},GPU-{i % 2},5,,,{i % 2},1,1,1\r\n"
        for i in range(120_000)
    ]
    parts.append(compressor.compress("".join(rows).encode()))
    chunk = rows[-1].encode() * (1024 * 1024 // len(rows[-1]))
    for _ in range(filler_mib):
        parts.append(compressor.compress(chunk))
    parts.append(compressor.flush())
    return b"".join(parts)


def _bomb_of_one_line(mib: int) -> bytes:
    """One row whose run_id cell is the whole bomb: a line no parser may buffer whole."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    day = yesterday().date().isoformat()
    parts = [
        compressor.compress((",".join(GPU_SAMPLE) + "\r\n").encode()),
        compressor.compress(f"{day}T01:00:00+00:00,GPU-0,5,".encode()),
    ]
    chunk = b"a" * (1024 * 1024)
    for _ in range(mib):
        parts.append(compressor.compress(chunk))
    parts.append(compressor.compress(b",,0,1,1,1\r\n"))
    parts.append(compressor.flush())
    return b"".join(parts)


@pytest.mark.parametrize("kind", ["rows", "one line"])
def test_archive_bomb_is_413_with_a_small_worker(board: LiveBoard, host: Host, kind: str) -> None:
    body = _bomb_of_rows(256) if kind == "rows" else _bomb_of_one_line(256)
    assert len(body) < 4 * 1024 * 1024, len(body)
    day = yesterday().date().isoformat()
    before = stored(board, host)
    with measure_peaks(board) as peaks:
        reply = upload_archive(board, host, "gpu_sample", day, body)
    detail = refused(reply, 413)
    assert "decompress" in detail or "limit" in detail, detail
    assert peaks.worst_mib < BOMB_PEAK_MIB, (
        f"a worker grew by {peaks.worst_mib:.0f} MiB on a {len(body) // 1024} KiB bomb"
    )
    assert stored(board, host) == before
    with board.client(host.token) as c:
        assert board.call(c, "GET", "/agent/v1/archives").json() == {"archives": []}


def test_archive_with_too_many_rows(board: LiveBoard, host: Host) -> None:
    start = yesterday()
    rows = [
        [(start + timedelta(seconds=i)).isoformat(), "GPU-0", 5, "", "", 0, 1, 1, 1]
        for i in range(ARCHIVE_MAX_ROWS + 5_000)
    ]
    body = gz_csv(GPU_SAMPLE, rows)
    before = stored(board, host)
    with measure_peaks(board) as peaks:
        reply = upload_archive(board, host, "gpu_sample", start.date().isoformat(), body)
    refused(reply, 413, 422)
    assert peaks.worst_mib < BOMB_PEAK_MIB, peaks
    assert stored(board, host) == before


def _set_max_gpus(board: LiveBoard, tenant: Tenant, value: object) -> Reply:
    with board.client(tenant.admin.token) as c:
        return board.call(
            c, "PATCH", f"/api/v1/workspaces/{tenant.slug}/settings", json={"maxGpusPerHost": value}
        )


@pytest.mark.parametrize("value", [0, -1, 4097, 10**30, "7", 7.5, None, True])
def test_max_gpus_setting_bad_values(board: LiveBoard, scratch: Tenant, value: object) -> None:
    refused(_set_max_gpus(board, scratch, value), 400, 422)


def test_gpu_identities_per_host_are_capped(board: LiveBoard, scratch: Tenant, host: Host) -> None:
    limit = 7
    reply = _set_max_gpus(board, scratch, limit)
    assert reply.status_code == 200, reply
    assert reply.json()["maxGpusPerHost"] == limit, reply
    first = tuple(f"GPU-first-{i}" for i in range(4))
    assert push(board, host, observation(gpu_uuids=first)).status_code == 202
    before = stored(board, host)
    assert before[1] == 4, before
    others = tuple(f"GPU-other-{i}" for i in range(4))
    detail = refused(push(board, host, observation(gpu_uuids=others)), 422)
    assert str(limit) in detail, f"the refusal does not name the limit: {detail}"
    assert stored(board, host) == before
    # One push with more cards than the limit, on a new host, is refused too.
    fresh = enroll(board, scratch, unique("many-gpus"))
    many = tuple(f"GPU-many-{i}" for i in range(limit + 1))
    detail = refused(push(board, fresh, observation(gpu_uuids=many)), 422)
    assert str(limit) in detail, detail
    assert stored(board, fresh)[1] == 0
    # The cards already known keep reporting.
    assert push(board, host, observation(gpu_uuids=first)).status_code == 202


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


def test_oversized_stream_frames_close_the_socket(board: LiveBoard, host: Host) -> None:
    """A frame far beyond any util message: the socket is closed, the worker stays small."""
    import asyncio

    import websockets

    async def send_big() -> str:
        url = board.url.replace("http", "ws", 1) + "/agent/v1/stream"
        async with websockets.connect(
            url, additional_headers=host.auth, open_timeout=30, max_size=None
        ) as ws:
            try:
                for _ in range(5):
                    await ws.send("x" * (32 * 1024 * 1024))
                await asyncio.wait_for(ws.wait_closed(), 30)
            except (websockets.ConnectionClosed, TimeoutError):
                pass
            return f"{ws.close_code}"

    with measure_peaks(board) as peaks:
        closed = asyncio.run(send_big())
    assert closed != "None", "a 32 MiB frame was taken in"
    assert peaks.worst_mib < BOMB_PEAK_MIB, f"a worker grew by {peaks.worst_mib:.0f} MiB"
