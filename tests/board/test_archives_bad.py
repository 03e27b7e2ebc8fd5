"""Broken uploads: a 4xx with a string detail, and nothing stored, listed or queued."""

from __future__ import annotations

import gzip
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.board.builders import enroll, make_tenant
from tests.board.db import scalar
from tests.board.test_archives import (
    GPU_SAMPLE,
    archive_of,
    bearer,
    gz_csv,
    make_ticks,
    upload,
    yesterday,
)

LIMIT = 16 * 1024


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> object:
    from board.settings import Settings

    return Settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        archive_max_bytes=LIMIT,
        archive_max_uncompressed_bytes=4 * LIMIT,
    )


@pytest.fixture
async def host(app: Any, client: httpx.AsyncClient) -> dict[str, Any]:
    tenant = await make_tenant(app, "acme")
    return await enroll(client, tenant)


DAY = yesterday().date().isoformat()
GOOD_GPU = archive_of(make_ticks(yesterday() + timedelta(hours=1), n=3))[0]
# Today and tomorrow are read when the case runs, not at import: a run that crosses
# midnight UTC would otherwise upload for a day that has closed meanwhile.
TODAY = "<today>"
TOMORROW = "<tomorrow>"


def _day_of(day: str) -> str:
    today = datetime.now(UTC).date()
    relative = {TODAY: today, TOMORROW: today + timedelta(days=1)}.get(day)
    return day if relative is None else relative.isoformat()


OTHER_DAY = (yesterday() - timedelta(days=1)).date().isoformat()


def _rows(n: int) -> list[list[Any]]:
    return [[f"{DAY}T00:00:00+00:00", f"GPU-{i}", 5, "", "", 0, 1, 1, 1] for i in range(n)]


def _cells(ts: str = f"{DAY}T01:00:00+00:00", uuid: str = "GPU-0") -> list[Any]:
    return [ts, uuid, 5, "", "", 0, 1, 1, 1]


CASES: dict[str, tuple[str, str, bytes, int, str]] = {
    "not gzip": ("gpu_sample", DAY, b"ts,gpu_uuid,util_pct\r\n", 400, "not gzip"),
    "truncated gzip": ("gpu_sample", DAY, GOOD_GPU[: len(GOOD_GPU) // 2], 400, "gzip"),
    "not text": ("gpu_sample", DAY, gzip.compress(os.urandom(2000)), 400, "UTF-8"),
    "not CSV": ("gpu_sample", DAY, gzip.compress(b'{"gpus": []}'), 400, "lacks the column"),
    "empty": ("gpu_sample", DAY, gzip.compress(b""), 400, "header row"),
    "ragged rows": ("gpu_sample", DAY, gz_csv(GPU_SAMPLE, [["x", "GPU-0"]]), 400, "fields"),
    "bad ts": (
        "gpu_sample",
        DAY,
        gz_csv(GPU_SAMPLE, [["noon", "G", 1, "", "", 0, 1, 1, 1]]),
        400,
        "ISO 8601",
    ),
    "not ordered by ts": (
        "gpu_sample",
        DAY,
        gz_csv(
            GPU_SAMPLE, [[f"{DAY}T0{h}:00:00+00:00", "G", 1, "", "", 0, 1, 1, 1] for h in (2, 1)]
        ),
        400,
        "not ordered by ts",
    ),
    "ts of another day": ("gpu_sample", OTHER_DAY, GOOD_GPU, 400, "not on the UTC day"),
    "today": ("gpu_sample", TODAY, GOOD_GPU, 422, "not a closed UTC day"),
    "future": ("proc_sample", TOMORROW, GOOD_GPU, 422, "not a closed UTC day"),
    "not a date": ("gpu_sample", "20261130", GOOD_GPU, 422, "YYYY-MM-DD"),
    "impossible date": ("gpu_sample", "2026-02-30", GOOD_GPU, 422, "calendar date"),
    "_full for a day table": ("gpu_sample", "_full", GOOD_GPU, 422, "YYYY-MM-DD"),
    "a day for a full table": ("gpu_device", DAY, GOOD_GPU, 422, "date=_full"),
    "unknown table": ("host", DAY, GOOD_GPU, 422, "Unknown archive table"),
    "no table": ("", DAY, GOOD_GPU, 422, "'table' is required"),
    "too large": ("gpu_sample", DAY, os.urandom(LIMIT + 1), 413, "larger than the limit"),
    "gzip bomb": ("gpu_sample", DAY, gz_csv(GPU_SAMPLE, _rows(3000)), 413, "decompresses"),
    "blank-line bomb": (
        "gpu_sample",
        DAY,
        gzip.compress(b"ts,gpu_uuid,util_pct\r\n" + b"\r\n" * 100_000),
        413,
        "decompresses",
    ),
    "NUL in a cell": ("gpu_sample", DAY, gz_csv(GPU_SAMPLE, [_cells(uuid="G\x00")]), 400, "NUL"),
    "NUL in the header": ("gpu_sample", DAY, gz_csv(["ts\x00", "x"], []), 400, "NUL"),
    "invalid UTF-8 in a cell": (
        "gpu_sample",
        DAY,
        gzip.compress(f"ts,gpu_uuid,util_pct\r\n{DAY}T01:00:00+00:00,G".encode() + b"\xc3(,1\r\n"),
        400,
        "UTF-8",
    ),
    "huge field": (
        "gpu_sample",
        DAY,
        gz_csv(GPU_SAMPLE, [_cells(uuid="G" * 10_000)]),
        413,
        "GUA_BOARD_ARCHIVE_MAX_ROW_CHARS",
    ),
    "a quoted field over many lines": (
        "gpu_sample",
        DAY,
        gz_csv(GPU_SAMPLE, [_cells(uuid="\n" * 10_000)]),
        413,
        "GUA_BOARD_ARCHIVE_MAX_ROW_CHARS",
    ),
    "thousands of columns": (
        "gpu_sample",
        DAY,
        gz_csv([*GPU_SAMPLE, *(f"c{i}" for i in range(3000))], []),
        413,
        "GUA_BOARD_ARCHIVE_MAX_ROW_CHARS",
    ),
    "hundreds of columns": (
        "gpu_sample",
        DAY,
        gz_csv([*GPU_SAMPLE, *(f"c{i}" for i in range(300))], []),
        413,
        "GUA_BOARD_ARCHIVE_MAX_COLUMNS",
    ),
    "ts overflowing in UTC": (
        "gpu_sample",
        DAY,
        gz_csv(GPU_SAMPLE, [_cells(ts="9999-12-31T23:59:59-05:00")]),
        400,
        "ISO 8601",
    ),
    "junk after the gzip data": ("gpu_sample", DAY, GOOD_GPU + b"junk", 400, "gzip"),
    "gzip of gzip": ("gpu_sample", DAY, gzip.compress(GOOD_GPU), 400, "UTF-8"),
    "year 9999": ("gpu_sample", "9999-12-31", GOOD_GPU, 422, "not a closed UTC day"),
    "year 1": ("gpu_sample", "0001-01-01", GOOD_GPU, 422, "before 2000-01-01"),
    "no leap day": ("gpu_sample", "2025-02-29", GOOD_GPU, 422, "calendar date"),
    "a plus sign": ("gpu_sample", "%2B2026-11-30", GOOD_GPU, 422, "YYYY-MM-DD"),
    "full-width digits": ("gpu_sample", "２０２６-１１-３０", GOOD_GPU, 422, "YYYY-MM-DD"),
    "a long table name": ("t" * 5000, DAY, GOOD_GPU, 422, "Unknown archive table"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_bad_archive_is_refused_and_changes_nothing(
    case: str, app: Any, client: httpx.AsyncClient, host: dict[str, Any], settings: Any
) -> None:
    table, day, body, status, words = CASES[case]
    assert case != "gzip bomb" or len(body) <= LIMIT < 4 * LIMIT < len(gzip.decompress(body))
    r = await upload(client, host, table, _day_of(day), body)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str)
    assert words in detail
    listed = await client.get("/agent/v1/archives", headers=bearer(host))
    assert listed.json() == {"archives": []}
    assert not [p for p in (settings.data_dir / "archives").rglob("*") if p.is_file()]
    assert await scalar(app, "SELECT count(*) FROM archive_backfills") == 0
    rejected = await scalar(
        app, "SELECT sum(count) FROM host_rejections WHERE reason = 'archive_rejected'"
    )
    assert rejected == 1


async def test_bad_prune_parameter(client: httpx.AsyncClient, host: dict[str, Any]) -> None:
    for query in (
        "",
        "?olderThanDays=-1",
        "?olderThanDays=soon",
        "?olderThanDays=" + "9" * 5000,  # int() of it raises; a timedelta of it overflows
        "?olderThanDays=99999999999",
        "?olderThanDays=36501",
        "?olderThanDays=%2B5",
        "?olderThanDays=１２",
    ):
        r = await client.delete(f"/agent/v1/archives{query}", headers=bearer(host))
        assert r.status_code == 422, (query[:40], r.text)
        assert isinstance(r.json()["detail"], str)
        assert len(r.json()["detail"]) < 300


async def test_a_refused_upload_keeps_the_stored_one(
    client: httpx.AsyncClient, host: dict[str, Any]
) -> None:
    assert (await upload(client, host, "gpu_sample", DAY, GOOD_GPU)).status_code == 201
    before = (await client.get("/agent/v1/archives", headers=bearer(host))).json()
    assert (await upload(client, host, "gpu_sample", DAY, b"junk")).status_code == 400
    assert (await client.get("/agent/v1/archives", headers=bearer(host))).json() == before
