"""Archive uploads and prunes of a hostile agent, on the served board: a bad target or
day is a 4xx with a string `detail`; a body that decompresses far beyond the limit (a
bomb of rows or of one line) is a 413 while the worker stays small, and one of too many
rows is refused.
"""

from __future__ import annotations

import zlib
from datetime import timedelta

import pytest

from tests.security.checks import stored
from tests.security.conftest import ARCHIVE_MAX_ROWS
from tests.security.seed import (
    GPU_SAMPLE,
    Host,
    gz_csv,
    upload_archive,
    yesterday,
)
from tests.support.live import LiveBoard, measure_peaks
from tests.support.replies import refused

BOMB_PEAK_MIB = 200


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
