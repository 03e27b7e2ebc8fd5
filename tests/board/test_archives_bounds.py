"""What one host's agent token can make an archive cost: CPU, memory, rows, GPUs, dates."""

from __future__ import annotations

import asyncio
import csv
import gzip
import io
import random
import threading
import tracemalloc
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest

from board.archives import service
from board.archives.csvfile import BadArchive, Limits, Stopped, validate
from board.errors import Unprocessable
from board.settings import Settings
from tests.board.builders import enroll, make_tenant
from tests.board.db import execute, rows
from tests.board.test_archives import (
    GPU_DEVICE,
    GPU_SAMPLE,
    PROC_SAMPLE,
    Card,
    Proc,
    Tick,
    archive_of,
    backfill_of,
    bearer,
    device_table,
    gz_csv,
    make_ticks,
    observation_count,
    push_all,
    rollups,
    upload,
    yesterday,
)

DAY = yesterday().date()
TS = f"{DAY.isoformat()}T01:00:00+00:00"


def limits(**overrides: Any) -> Limits:
    return Limits.of(Settings(**overrides))


def gz_text(*parts: str) -> bytes:
    return gzip.compress("".join(parts).encode(), 6)


def gpu_rows(n: int, same_ts: bool = False) -> list[list[Any]]:
    start = yesterday() + timedelta(hours=1)
    return [
        [(start if same_ts else start + timedelta(seconds=i)).isoformat(), f"GPU-{i}", 5] + [""] * 6
        for i in range(n)
    ]


def refused(table: str, data: bytes, lim: Limits, day: date | None = DAY) -> BadArchive:
    with pytest.raises(BadArchive) as caught:
        validate(table, day, data, lim)
    return caught.value


# -- reading limits (csvfile) ----------------------------------------------------------


def test_rows_and_lines_are_counted_against_the_row_limit() -> None:
    lim = limits(archive_max_rows=100)
    assert validate("gpu_sample", DAY, gz_csv(GPU_SAMPLE, gpu_rows(100)), lim).rows == 100
    too_many = refused("gpu_sample", gz_csv(GPU_SAMPLE, gpu_rows(101)), lim)
    assert too_many.too_large
    assert "GUA_BOARD_ARCHIVE_MAX_ROWS" in too_many.detail
    # Blank lines cost as much to read as rows.
    blank = refused("gpu_sample", gz_text(",".join(GPU_SAMPLE), "\r\n" * 500), lim)
    assert blank.too_large
    assert "GUA_BOARD_ARCHIVE_MAX_ROWS" in blank.detail


def test_a_small_bomb_stops_at_its_expansion_limit() -> None:
    bomb = gz_text(",".join(GPU_SAMPLE), "\r\n" * (8 * 1024 * 1024))
    assert len(bomb) < 64 * 1024
    error = refused("gpu_sample", bomb, limits())
    assert error.too_large
    assert "GUA_BOARD_ARCHIVE_MAX_EXPANSION" in error.detail


def test_the_limits_of_one_instant() -> None:
    lim = limits(archive_max_tick_rows=64, archive_max_tick_chars=64 * 1024)
    assert validate("gpu_sample", DAY, gz_csv(GPU_SAMPLE, gpu_rows(64, same_ts=True)), lim)
    error = refused("gpu_sample", gz_csv(GPU_SAMPLE, gpu_rows(65, same_ts=True)), lim)
    assert error.too_large
    assert "GUA_BOARD_ARCHIVE_MAX_TICK_ROWS" in error.detail
    # The same instant written two ways is one instant.
    other = TS.replace("+00:00", "Z")
    mixed = [[TS if i % 2 else other, f"G{i}", 1] + [""] * 6 for i in range(65)]
    assert refused("gpu_sample", gz_csv(GPU_SAMPLE, mixed), lim).too_large
    wide = [[TS, f"G{i}", 1, "x" * 3000] + [""] * 5 for i in range(30)]
    assert (
        "GUA_BOARD_ARCHIVE_MAX_TICK_CHARS"
        in refused("gpu_sample", gz_csv(GPU_SAMPLE, wide), lim).detail
    )


@pytest.mark.parametrize(
    ("body", "words", "too_large"),
    [
        (gz_text("ts,gpu_uuid,util_pct\r\n", TS, ",", "G" * 5000, ",1\r\n"), "ROW_CHARS", True),
        (gz_text("ts,gpu_uuid,util_pct\r\n", TS, ',"', "\n" * 5000, '",1\r\n'), "ROW_CHARS", True),
        (gz_text(",".join(f"c{i}" for i in range(3000)), "\r\n"), "ROW_CHARS", True),
        (gz_text(",".join(["ts", *(f"c{i}" for i in range(300))]), "\r\n"), "COLUMNS", True),
        (gz_text("ts,gpu_uuid,util_pct\r\n", TS, ",G\x00,1\r\n"), "NUL", False),
        (
            gzip.compress(b"ts,gpu_uuid,util_pct\r\n" + TS.encode() + b",G\xff\xfe,1\r\n"),
            "UTF-8",
            False,
        ),
        (
            gz_text("ts,gpu_uuid,util_pct\r\n9999-12-31T23:59:59-05:00,G,1\r\n"),
            "ISO 8601",
            False,
        ),
        (
            gz_text("ts,gpu_uuid,util_pct\r\n0001-01-01T00:00:00+01:00,G,1\r\n"),
            "ISO 8601",
            False,
        ),
        (gz_csv(GPU_SAMPLE, gpu_rows(3)) + b"trailing junk", "gzip", False),
        (gz_csv(GPU_SAMPLE, gpu_rows(3))[:-5], "gzip", False),
    ],
    ids=[
        "huge field",
        "a field over many lines",
        "thousands of columns",
        "too many columns",
        "NUL",
        "invalid UTF-8",
        "ts past year 9999 in UTC",
        "ts before year 1 in UTC",
        "trailing junk",
        "truncated",
    ],
)
def test_hostile_content_is_refused_with_a_reason(body: bytes, words: str, too_large: bool) -> None:
    error = refused("gpu_sample", body, limits())
    assert words in error.detail
    assert error.too_large is too_large


def test_concatenated_gzip_members_and_a_header_only_file_are_read() -> None:
    text = io.StringIO()
    csv.writer(text).writerows([GPU_SAMPLE, *gpu_rows(10)])
    lines = text.getvalue().splitlines(keepends=True)
    two_members = gz_text(*lines[:4]) + gz_text(*lines[4:])
    assert validate("gpu_sample", DAY, two_members, limits()).rows == 10
    assert validate("gpu_sample", DAY, gz_csv(GPU_SAMPLE, []), limits()).rows == 0


def test_a_gpu_device_table_is_bounded_by_the_most_gpus_a_host_may_have() -> None:
    seen = yesterday().isoformat()
    many = gz_csv(GPU_DEVICE, [[f"GPU-{i}", "A6000", 49140, seen, seen] for i in range(100_000)])
    error = refused("gpu_device", many, limits(), day=None)
    assert error.too_large
    assert "4096" in error.detail


def test_a_set_stop_flag_ends_the_reading() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(Stopped):
        validate("gpu_sample", DAY, gz_csv(GPU_SAMPLE, gpu_rows(3000)), limits(), stop)


async def test_a_cancelled_upload_tells_its_check_to_stop() -> None:
    """The awaiting request goes away: the validating thread is told to stop."""
    gate = service.validation_gate()
    for _ in range(service.VALIDATIONS_AT_ONCE):
        await gate.acquire()  # every slot busy: the upload waits its turn
    try:
        stop = threading.Event()
        body = gz_csv(GPU_SAMPLE, gpu_rows(10))
        task = asyncio.create_task(service.check_upload("gpu_sample", DAY, body, limits(), stop))
        while not getattr(gate, "_waiters", None):  # the check waits for its turn
            assert not task.done()
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stop.is_set()
    finally:
        for _ in range(service.VALIDATIONS_AT_ONCE):
            gate.release()
    checked = await service.check_upload("gpu_sample", DAY, body, limits())
    assert checked.rows == 10


class ThreadRecordingEvent(threading.Event):
    """A stop flag that notes which threads look at it (the reading thread does)."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def is_set(self) -> bool:
        self.threads.add(threading.get_ident())
        return super().is_set()


async def test_the_check_runs_off_the_event_loop() -> None:
    stop = ThreadRecordingEvent()
    body = gz_csv(GPU_SAMPLE, gpu_rows(3000))
    assert (await service.check_upload("gpu_sample", DAY, body, limits(), stop)).rows == 3000
    assert stop.threads
    assert threading.get_ident() not in stop.threads


async def test_uploads_past_the_checks_at_once_wait_and_the_board_still_answers(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    gate = service.validation_gate()
    for _ in range(service.VALIDATIONS_AT_ONCE):
        await gate.acquire()
    released = False
    try:
        gpu = archive_of(make_ticks(yesterday() + timedelta(hours=1), n=3))[0]
        pending = asyncio.create_task(upload(client, host, "gpu_sample", DAY.isoformat(), gpu))
        while not getattr(gate, "_waiters", None):  # the upload waits for its turn
            assert not pending.done(), pending.result().text
            await asyncio.sleep(0.01)
        listed = await client.get("/agent/v1/archives", headers=bearer(host))
        assert listed.json() == {"archives": []}
        assert not pending.done()
        for _ in range(service.VALIDATIONS_AT_ONCE):
            gate.release()
        released = True
        assert (await pending).status_code == 201
    finally:
        if not released:
            for _ in range(service.VALIDATIONS_AT_ONCE):
                gate.release()


# -- query parameters (service) --------------------------------------------------------

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("day", "words"),
    [
        ("9999-12-31", "not a closed UTC day"),
        ("0001-01-01", "before 2000-01-01"),
        ("1999-12-31", "before 2000-01-01"),
        ("2025-02-29", "not a calendar date"),
        ("2026-13-01", "not a calendar date"),
        ("２０２６-１２-０１", "YYYY-MM-DD"),
        ("+2026-12-01", "YYYY-MM-DD"),
        ("2026-12-01\n", "YYYY-MM-DD"),
        ("2026-12-1", "YYYY-MM-DD"),
        ("x" * 100_000, "YYYY-MM-DD"),
    ],
)
def test_odd_dates_are_a_422(day: str, words: str) -> None:
    with pytest.raises(Unprocessable) as caught:
        service.parse_target("gpu_sample", day, NOW, Settings())
    assert words in caught.value.detail
    assert len(caught.value.detail) < 300


def test_dates_that_are_fine() -> None:
    for day in ("2024-02-29", "2000-01-01", "2026-12-02"):
        assert service.parse_target("gpu_sample", day, NOW, Settings())[1] == day
    with pytest.raises(Unprocessable) as caught:
        service.parse_target("t" * 100_000, "2026-12-02", NOW, Settings())
    assert len(caught.value.detail) < 300


@pytest.mark.parametrize(
    "text",
    [None, "", "-1", "+5", " 5", "5 ", "1e3", "0x10", "１２", "٣", "36501", "9" * 5000, "soon"],
)
def test_older_than_days_refuses_with_a_sentence(text: str | None) -> None:
    with pytest.raises(Unprocessable) as caught:
        service.parse_older_than_days(text)
    assert "olderThanDays" in caught.value.detail
    assert len(caught.value.detail) < 300


def test_older_than_days_accepts_the_range() -> None:
    assert service.parse_older_than_days("0") == 0
    assert service.parse_older_than_days("36500") == 36500
    assert service.parse_older_than_days("0" * 5000 + "30") == 30


# -- through the board -----------------------------------------------------------------


async def host_key(app: Any, host: dict[str, Any]) -> tuple[int, int]:
    [(workspace_id, host_id)] = await rows(
        app, "SELECT workspace_id, id FROM hosts WHERE public_id = %s::uuid", host["hostId"]
    )
    return int(workspace_id), int(host_id)


async def test_prune_is_safe_for_any_int(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    ticks = make_ticks(yesterday() + timedelta(hours=2), n=3)
    gpu, _ = archive_of(ticks)
    assert (await upload(client, host, "gpu_sample", DAY.isoformat(), gpu)).status_code == 201
    principal = await host_key(app, host)
    runtime = app.state.runtime
    for days in (10**100, 36_500, 800_000):
        async with runtime.sessions() as session:
            assert await service.prune(session, principal, days, datetime.now(UTC)) == []
    async with runtime.sessions() as session:
        dropped = await service.prune(session, principal, -(10**100), datetime.now(UTC))
        await session.commit()
    assert len(dropped) == 1  # a negative count is 0: everything before today
    for query in ("9" * 5000, "99999999999999999999", "36501", "%2B5"):
        r = await client.delete(f"/agent/v1/archives?olderThanDays={query}", headers=bearer(host))
        assert r.status_code == 422, r.text
        assert isinstance(r.json()["detail"], str)
    r = await client.delete("/agent/v1/archives?olderThanDays=36500", headers=bearer(host))
    assert r.status_code == 200, r.text


async def test_odd_dates_through_the_board(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    gpu = archive_of(make_ticks(yesterday(), n=2))[0]
    for day in ("9999-12-31", "0001-01-01", "２０２６-１２-０１", "%2B2026-12-01", "2025-02-29"):
        r = await upload(client, host, "gpu_sample", day, gpu)
        assert r.status_code == 422, (day, r.text)
        assert isinstance(r.json()["detail"], str)
    leap = datetime(2024, 2, 29, 6, tzinfo=UTC)
    r = await upload(client, host, "gpu_sample", "2024-02-29", archive_of(make_ticks(leap, 2))[0])
    assert r.status_code == 201, r.text
    listed = await client.get("/agent/v1/archives", headers=bearer(host))
    assert [a["date"] for a in listed.json()["archives"]] == ["2024-02-29"]


async def test_a_huge_gpu_device_table_is_refused(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    seen = yesterday().isoformat()
    many = gz_csv(GPU_DEVICE, [[f"GPU-{i}", "A6000", 49140, seen, seen] for i in range(100_000)])
    r = await upload(client, host, "gpu_device", "_full", many)
    assert r.status_code == 413, r.text
    assert "4096" in r.json()["detail"]
    assert (await client.get("/agent/v1/archives", headers=bearer(host))).json() == {"archives": []}


def cards(uuids: list[str], i: int) -> list[Card]:
    procs = [Proc(1000 + i % 3, "alice", "python", "compute", 100)]
    return [
        Card(u, n, "NVIDIA RTX A6000", 49140, util=(i * 13) % 100, mem=512, state=None, procs=procs)
        for n, u in enumerate(uuids)
    ]


async def test_backfill_keeps_to_the_workspace_gpu_limit(
    app: Any, client: httpx.AsyncClient
) -> None:
    """An archive naming more GPUs than the host may have: those ticks are skipped, said why."""
    tenant = await make_tenant(app, "acme")
    await execute(app, "UPDATE workspaces SET max_gpus_per_host = 4 WHERE slug = 'acme'")
    host = await enroll(client, tenant)
    two = ["GPU-0", "GPU-1"]
    six = [f"GPU-{i}" for i in range(6)]
    start = yesterday() + timedelta(hours=4)
    ticks = [
        Tick(
            start + timedelta(seconds=30 * i),
            cards(two if i < 10 else six if i < 20 else [*two, "GPU-2"], i),
        )
        for i in range(25)
    ]
    gpu, proc = archive_of(ticks)
    day = DAY.isoformat()
    seen = yesterday().isoformat()
    devices = gz_csv(GPU_DEVICE, [[u, "NVIDIA RTX A6000", 49140, seen, seen] for u in six])
    for table, when, body in (
        ("gpu_device", "_full", devices),
        ("gpu_sample", day, gpu),
        ("proc_sample", day, proc),
    ):
        assert (await upload(client, host, table, when, body)).status_code == 201
    job = await backfill_of(client, tenant, host, day)
    assert job["status"] == "done", job
    assert job["skippedReasons"] == {"over_max_gpus_per_host": 10}, job
    assert job["added"] == 15
    uuids = await rows(app, "SELECT uuid FROM gpus ORDER BY uuid")
    assert [u for (u,) in uuids] == ["GPU-0", "GPU-1", "GPU-2"]


async def test_header_only_and_concatenated_members_back_fill(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "acme")
    reference = await enroll(client, tenant, "reference")
    host = await enroll(client, tenant, "host")
    empty = await enroll(client, tenant, "empty")
    ticks = make_ticks(yesterday() + timedelta(hours=8), n=20)
    day = DAY.isoformat()
    await push_all(client, reference, ticks)
    gpu, proc = archive_of(ticks)
    split = gzip.decompress(proc).splitlines(keepends=True)
    proc = gzip.compress(b"".join(split[:7])) + gzip.compress(b"".join(split[7:]))
    for who, g, p in ((host, gpu, proc), (empty, gz_csv(GPU_SAMPLE, []), gz_csv(PROC_SAMPLE, []))):
        assert (await upload(client, who, "gpu_device", "_full", device_table())).status_code == 201
        assert (await upload(client, who, "gpu_sample", day, g)).status_code == 201
        assert (await upload(client, who, "proc_sample", day, p)).status_code == 201
    job = await backfill_of(client, tenant, host, day)
    assert (job["status"], job["added"], job["errors"]) == ("done", len(ticks), 0), job
    assert await rollups(app, host) == await rollups(app, reference)
    job = await backfill_of(client, tenant, empty, day)
    assert (job["status"], job["ticks"], job["added"]) == ("done", 0, 0), job


# -- memory of the back-fill -----------------------------------------------------------

EXTRA = [f"future_{i}" for i in range(200)]  # columns a newer agent might add
MEMORY_BOUND = 64 * 1024 * 1024


def hostile_ticks(n: int) -> list[Tick]:
    """Valid ticks, as heavy as the limits let them be: 8 GPUs x 32 processes, long names."""
    uuids = [f"GPU-{i:02d}-{'f' * 100}" for i in range(8)]
    start = yesterday() + timedelta(hours=12)
    ticks = []
    for i in range(n):
        cards_ = [
            Card(
                u,
                g,
                "NVIDIA H100 80GB HBM3",
                81559,
                util=(i + g) % 100,
                mem=1000 + i,
                state=None,
                procs=[
                    Proc(
                        10_000 + 32 * g + p,
                        f"user{p:02d}" + "u" * 56,
                        f"{p}-" + "n" * 250,
                        "compute",
                        10,
                    )
                    for p in range(32)
                ],
            )
            for g, u in enumerate(uuids)
        ]
        ticks.append(Tick(start + timedelta(seconds=i), cards_))
    return ticks


def wide_archive(ticks: list[Tick]) -> tuple[bytes, bytes, bytes]:
    """The day's objects with 200 more columns of random text on every process row."""
    rand = random.Random(7)
    proc = io.StringIO()
    writer = csv.writer(proc)
    writer.writerow(PROC_SAMPLE + EXTRA)
    for t in ticks:
        for c in t.cards:
            for p in c.procs:
                extra = [rand.getrandbits(48).to_bytes(6).hex() for _ in EXTRA]
                writer.writerow(
                    [
                        t.ts.isoformat(),
                        c.uuid,
                        p.pid,
                        p.mem,
                        p.user,
                        "root",
                        1,
                        c.index,
                        p.name,
                        p.type,
                    ]
                    + extra
                )
    gpu, _ = archive_of(ticks)
    seen = yesterday().isoformat()
    devices = gz_csv(GPU_DEVICE, [[c.uuid, c.name, c.total, seen, seen] for c in ticks[0].cards])
    return gpu, gzip.compress(proc.getvalue().encode(), 1), devices


async def test_backfill_memory_is_bounded(app: Any, client: httpx.AsyncClient) -> None:
    """Peak traced memory of a heavy day's back-fill, which used to grow with its ticks.

    A chunk of observations held up to 256 ticks whatever their size: this day (80 ticks
    of 256 processes with the longest names) peaked at 77 MiB, and a day of more such
    ticks at several times that. Now a chunk holds a bounded number of rows (~20 MiB).
    """
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    ticks = hostile_ticks(80)
    gpu, proc, devices = wide_archive(ticks)
    archives = app.state.runtime.archives
    await archives.stop()  # the back-fill starts below, under tracemalloc
    day = DAY.isoformat()
    for table, when, body in (
        ("gpu_device", "_full", devices),
        ("gpu_sample", day, gpu),
        ("proc_sample", day, proc),
    ):
        r = await upload(client, host, table, when, body)
        assert r.status_code == 201, r.text
    del gpu, proc
    tracemalloc.start()
    try:
        await archives.start()
        job = await backfill_of(client, tenant, host, day, timeout=600)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (job["status"], job["added"], job["errors"]) == ("done", len(ticks), 0), job
    assert peak < MEMORY_BOUND, f"back-fill peak {peak / 2**20:.1f} MiB"
    assert await observation_count(app, host) == len(ticks)
    stored = await rows(
        app,
        "SELECT count(*), count(DISTINCT name), count(DISTINCT linux_user) FROM process_samples",
    )
    assert stored == [(len(ticks) * 8 * 32, 32, 32)]


async def test_wide_rows_back_fill_like_live_pushes(app: Any, client: httpx.AsyncClient) -> None:
    """Only the columns used are kept from a row: the result is the live pushes' result."""
    tenant = await make_tenant(app, "acme")
    live = await enroll(client, tenant, "live")
    archived = await enroll(client, tenant, "archived")
    ticks = hostile_ticks(6)
    await push_all(client, live, ticks)
    day = DAY.isoformat()
    gpu, proc, devices = wide_archive(ticks)
    for table, when, body in (
        ("gpu_device", "_full", devices),
        ("gpu_sample", day, gpu),
        ("proc_sample", day, proc),
    ):
        assert (await upload(client, archived, table, when, body)).status_code == 201
    job = await backfill_of(client, tenant, archived, day)
    assert (job["status"], job["added"], job["errors"]) == ("done", len(ticks), 0), job
    assert await rollups(app, archived) == await rollups(app, live)
    processes = """
        SELECT p.observed_at, p.pid, p.linux_user, p.name, p.type, p.memory_used_mb
        FROM process_samples p JOIN hosts h ON h.workspace_id = p.workspace_id
             AND h.id = p.host_id
        WHERE h.public_id = %s::uuid ORDER BY 1, 2
    """
    assert await rows(app, processes, archived["hostId"]) == await rows(
        app, processes, live["hostId"]
    )
