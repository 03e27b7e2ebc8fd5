"""Archives: stored, listed, pruned; back-filled into raw history and rollups exactly once."""

from __future__ import annotations

import asyncio
import csv
import gzip
import io
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from typing import Any

import httpx

from tests.board.builders import Tenant, enroll, make_tenant, push
from tests.board.db import rows, scalar

GPU_SAMPLE = [
    "ts",
    "gpu_uuid",
    "util_pct",
    "run_id",
    "usage_state",
    "gpu_index",
    "memory_used_mb",
    "temperature_c",
    "power_w",
]
PROC_SAMPLE = [
    "ts",
    "gpu_uuid",
    "pid",
    "mem_used_mb",
    "loginuid_user",
    "owner_user",
    "run_id",
    "gpu_index",
    "process_name",
    "process_type",
]
GPU_DEVICE = ["gpu_uuid", "name", "memory_total_mb", "first_seen", "last_seen"]
DAEMON_RUN = ["id", "started_at", "interval_seconds"]
CARDS = [("GPU-0", 0, "NVIDIA RTX A6000", 49140), ("GPU-1", 1, "NVIDIA RTX A6000", 49140)]


def yesterday() -> datetime:
    day = datetime.now(UTC).date() - timedelta(days=1)
    return datetime.combine(day, time(), UTC)


def gz_csv(header: list[str], data: list[list[Any]]) -> bytes:
    """What the agent uploads: csv.writer defaults (\\r\\n), UTF-8, gzip."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(["" if v is None else v for v in row] for row in data)
    return gzip.compress(buffer.getvalue().encode(), 6)


@dataclass
class Proc:
    pid: int
    user: str  # "unknown" is written to the archive as an empty loginuid_user
    name: str
    type: str
    mem: int | None


@dataclass
class Card:
    uuid: str
    index: int
    name: str
    total: int
    util: int
    mem: int
    state: str | None
    procs: list[Proc] = field(default_factory=list)


@dataclass
class Tick:
    ts: datetime
    cards: list[Card]

    def payload(self, with_state: bool = True) -> dict[str, Any]:
        return {
            "schemaVersion": "availability.snapshot.v1",
            "collectionStatus": "ok",
            "errors": [],
            "observedAt": self.ts.isoformat(),
            "host": {"hostname": "vm", "agentVersion": "1.8.0", "driverVersion": "560.35"},
            "gpus": [
                {
                    "index": c.index,
                    "uuid": c.uuid,
                    "name": c.name,
                    "memoryTotalMb": c.total,
                    "utilPct": c.util,
                    "memoryUsedMb": c.mem,
                    "temperatureC": 40,
                    "powerW": 70,
                    "processes": [
                        {
                            "pid": p.pid,
                            "linuxUser": p.user,
                            "name": p.name,
                            "type": p.type,
                            "memoryUsedMb": p.mem,
                        }
                        for p in c.procs
                    ],
                    **({"usageState": c.state} if with_state and c.state else {}),
                }
                for c in self.cards
            ],
        }


def make_ticks(start: datetime, n: int = 80, step: float = 30.0) -> list[Tick]:
    """A varied day: states, shared cards, graphics-only cards, unknown users, one gap."""
    ticks = []
    at = start
    for i in range(n):
        at += timedelta(seconds=step if i != n // 2 else 600)  # one gap > maxSampleGap
        at += timedelta(microseconds=(i * 7919) % 1_000_000 - at.microsecond)
        util0 = (i * 37) % 100
        procs0 = [Proc(1000 + i % 3, "alice", "python", "compute", 70000)]
        if i % 4 == 0:
            procs0.append(Proc(2000, "bob", "train", "compute", None))
        if i % 5 == 0:
            procs0.append(Proc(3000, "unknown", "unknown", "compute", 100))
        state0 = "active" if util0 > 5 else "idle_held"
        procs1 = [Proc(4000, "gdm", "Xorg", "graphics", 128)] if i % 2 else []
        ticks.append(
            Tick(
                at,
                [
                    Card(*CARDS[0], util=util0, mem=(i * 997) % 49140, state=state0, procs=procs0),
                    Card(*CARDS[1], util=i % 7, mem=128, state="idle", procs=procs1),
                ],
            )
        )
    return ticks


def archive_of(ticks: list[Tick], with_state: bool = True) -> tuple[bytes, bytes]:
    gpu_rows, proc_rows = [], []
    for t in ticks:
        for c in t.cards:
            gpu_rows.append(
                [
                    t.ts.isoformat(),
                    c.uuid,
                    c.util,
                    1,
                    c.state if with_state else None,
                    c.index,
                    c.mem,
                    40,
                    70,
                ]
            )
            for p in c.procs:
                proc_rows.append(
                    [
                        t.ts.isoformat(),
                        c.uuid,
                        p.pid,
                        p.mem,
                        "" if p.user == "unknown" else p.user,
                        "root",
                        1,
                        c.index,
                        "" if p.name == "unknown" else p.name,
                        p.type,
                    ]
                )
    return gz_csv(GPU_SAMPLE, gpu_rows), gz_csv(PROC_SAMPLE, proc_rows)


def device_table() -> bytes:
    seen = yesterday().isoformat()
    return gz_csv(GPU_DEVICE, [[u, n, t, seen, seen] for u, _, n, t in CARDS])


def bearer(host: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {host['agentToken']}"}


async def upload(
    client: httpx.AsyncClient, host: dict[str, Any], table: str, day: str, body: bytes
) -> httpx.Response:
    return await client.post(
        f"/agent/v1/archives?date={day}&table={table}",
        content=body,
        headers={**bearer(host), "Content-Type": "application/gzip"},
    )


async def upload_day(
    client: httpx.AsyncClient, host: dict[str, Any], ticks: list[Tick], **kw: Any
) -> None:
    """What `gua sync-archive` sends for one day: both day tables, then the _full tables."""
    gpu, proc = archive_of(ticks, **kw)
    day = ticks[0].ts.date().isoformat()
    for table, body in (("gpu_sample", gpu), ("proc_sample", proc)):
        r = await upload(client, host, table, day, body)
        assert r.status_code == 201, r.text
    for table, body in (
        ("daemon_run", gz_csv(DAEMON_RUN, [[1, day, 30.0]])),
        ("gpu_device", device_table()),
    ):
        r = await upload(client, host, table, "_full", body)
        assert r.status_code == 201, r.text


async def backfill_of(
    client: httpx.AsyncClient,
    tenant: Tenant,
    host: dict[str, Any],
    day: str,
    until: tuple[str, ...] = ("done", "failed"),
    timeout: float = 30,
) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        r = await client.get(
            f"/api/v1/workspaces/{tenant.slug}/hosts/{host['hostId']}/archives",
            headers=tenant.auth("member"),
        )
        assert r.status_code == 200, r.text
        jobs: dict[str, dict[str, Any]] = {j["date"]: j for j in r.json()["backfills"]}
        job = jobs.get(day)
        if job is not None and job["status"] in until:
            return job
        assert asyncio.get_running_loop().time() < deadline, f"back-fill stuck: {job}"
        await asyncio.sleep(0.1)


async def rollups(app: Any, host: dict[str, Any]) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """A host's rollups keyed by GPU uuid (and user) and hour: comparable across hosts."""
    gpu = await rows(
        app,
        """
        SELECT g.uuid, r.hour_start, r.covered_us, r.active_us, r.idle_held_us, r.idle_us,
               r.util_pct_us, r.memory_used_mb_us, r.memory_total_mb_us, r.sample_count
        FROM gpu_hour_rollups r
        JOIN gpus g ON g.workspace_id = r.workspace_id AND g.id = r.gpu_id
        JOIN hosts h ON h.workspace_id = r.workspace_id AND h.id = r.host_id
        WHERE h.public_id = %s::uuid
        """,
        host["hostId"],
    )
    user = await rows(
        app,
        """
        SELECT g.uuid, r.linux_user, r.hour_start, r.held_us, r.active_us, r.idle_held_us
        FROM user_hour_rollups r
        JOIN gpus g ON g.workspace_id = r.workspace_id AND g.id = r.gpu_id
        JOIN hosts h ON h.workspace_id = r.workspace_id AND h.id = r.host_id
        WHERE h.public_id = %s::uuid
        """,
        host["hostId"],
    )
    return {r[:2]: r[2:] for r in gpu}, {r[:3]: r[3:] for r in user}


async def observation_count(app: Any, host: dict[str, Any]) -> int:
    return int(
        await scalar(
            app,
            "SELECT count(*) FROM host_observations o JOIN hosts h "
            "ON h.workspace_id = o.workspace_id AND h.id = o.host_id WHERE h.public_id = %s::uuid",
            host["hostId"],
        )
    )


async def push_all(
    client: httpx.AsyncClient, host: dict[str, Any], ticks: list[Tick], **kw: Any
) -> None:
    for t in ticks:
        r = await push(client, host["agentToken"], t.payload(**kw))
        assert r.status_code == 202, r.text


async def test_store_list_overwrite_prune(
    app: Any, client: httpx.AsyncClient, settings: Any
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    ticks = make_ticks(yesterday() + timedelta(hours=9), n=4)
    await upload_day(client, host, ticks)
    await upload(client, host, "gpu_device", "_full", device_table())  # overwritten in place
    listed = await client.get("/agent/v1/archives", headers=bearer(host))
    assert listed.status_code == 200
    pairs = sorted((a["date"], a["table"]) for a in listed.json()["archives"])
    day = ticks[0].ts.date().isoformat()
    assert pairs == sorted(
        [
            (day, "gpu_sample"),
            (day, "proc_sample"),
            ("_full", "daemon_run"),
            ("_full", "gpu_device"),
        ]
    )
    stored = sorted(p.name for p in (settings.data_dir / "archives").rglob("*.csv.gz"))
    assert stored == sorted(["_full.csv.gz", "_full.csv.gz", f"{day}.csv.gz", f"{day}.csv.gz"])

    other = await enroll(client, tenant, "other")
    mine = await client.get("/agent/v1/archives", headers=bearer(other))
    assert mine.json() == {"archives": []}

    kept = await client.delete("/agent/v1/archives?olderThanDays=30", headers=bearer(host))
    assert kept.status_code == 200, kept.text
    assert kept.json()["deleted"] == 0
    pruned = await client.delete("/agent/v1/archives?olderThanDays=0", headers=bearer(host))
    assert pruned.json()["deleted"] == 2
    listed = await client.get("/agent/v1/archives", headers=bearer(host))
    assert {a["date"] for a in listed.json()["archives"]} == {"_full"}
    stored = sorted(p.name for p in (settings.data_dir / "archives").rglob("*.csv.gz"))
    assert stored == ["_full.csv.gz", "_full.csv.gz"]


async def test_archive_endpoints_need_the_agent_token(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "acme")
    for method, url in (
        ("GET", "/agent/v1/archives"),
        ("POST", "/agent/v1/archives?date=_full&table=daemon_run"),
        ("DELETE", "/agent/v1/archives?olderThanDays=3"),
    ):
        for headers in ({}, {"Authorization": "Bearer gua_agent_nope"}, tenant.auth()):
            r = await client.request(method, url, headers=headers, content=b"")
            assert r.status_code == 401, (method, r.text)
            assert isinstance(r.json()["detail"], str)


async def test_backfill_equals_live(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "acme")
    live = await enroll(client, tenant, "live")
    archived = await enroll(client, tenant, "archived")
    ticks = make_ticks(yesterday() + timedelta(hours=10, minutes=17))
    await push_all(client, live, ticks)
    await upload_day(client, archived, ticks)
    job = await backfill_of(client, tenant, archived, ticks[0].ts.date().isoformat())
    assert job["status"] == "done", job
    assert (job["ticks"], job["added"], job["skipped"], job["errors"]) == (
        len(ticks),
        len(ticks),
        0,
        0,
    )
    assert job["rowsRead"] == 2 * len(ticks) + sum(len(c.procs) for t in ticks for c in t.cards)
    assert await observation_count(app, archived) == len(ticks)
    expected = await rollups(app, live)
    assert expected[0]
    assert expected[1]
    assert await rollups(app, archived) == expected

    # The agent lists the day as stored; uploading it again changes no figure.
    await upload_day(client, archived, ticks)
    job = await backfill_of(client, tenant, archived, ticks[0].ts.date().isoformat())
    assert (job["added"], job["skippedReasons"]) == (0, {"already_stored": len(ticks)})
    assert await rollups(app, archived) == expected


async def test_overlap_with_live_is_not_counted_twice(app: Any, client: httpx.AsyncClient) -> None:
    """Live pushes cover part of the day; the archive covers all of it."""
    tenant = await make_tenant(app, "acme")
    reference = await enroll(client, tenant, "reference")
    host = await enroll(client, tenant, "host")
    ticks = make_ticks(yesterday() + timedelta(hours=3))
    await push_all(client, reference, ticks)
    await push_all(client, host, ticks[10:30] + ticks[50:60])
    # Some ticks the archive has at a slightly different time than the push that
    # carried them (an agent whose local row and push disagree by milliseconds).
    shifted = [
        Tick(t.ts + timedelta(milliseconds=3), t.cards) if 10 <= i < 20 else t
        for i, t in enumerate(ticks)
    ]
    await upload_day(client, host, shifted)
    job = await backfill_of(client, tenant, host, ticks[0].ts.date().isoformat())
    assert job["status"] == "done", job
    assert job["skippedReasons"] == {"already_stored": 20, "near_stored": 10}
    assert job["added"] == len(ticks) - 30
    assert await observation_count(app, host) == len(ticks)
    assert await rollups(app, host) == await rollups(app, reference)


async def test_old_columns_and_new_columns(app: Any, client: httpx.AsyncClient) -> None:
    """A local DB from agent 1.3 lacks usage_state etc.; a future one adds columns."""
    tenant = await make_tenant(app, "acme")
    reference = await enroll(client, tenant, "reference")
    host = await enroll(client, tenant, "host")
    ticks = make_ticks(yesterday() + timedelta(hours=5), n=30)
    await push_all(client, reference, ticks, with_state=False)
    await push_all(client, host, ticks[:1], with_state=False)  # the board knows its GPUs
    gpu_rows = [["x", t.ts.isoformat(), c.util, c.uuid, c.mem] for t in ticks for c in t.cards]
    proc_rows = [
        [t.ts.isoformat(), c.uuid, p.pid, p.mem, p.user if p.user != "unknown" else ""]
        for t in ticks
        for c in t.cards
        for p in c.procs
        if p.type == "compute"
    ]
    # Agents before 1.4 knew no graphics processes and sent no type or usageState.
    for t in ticks:
        for c in t.cards:
            c.procs = [p for p in c.procs if p.type == "compute"]
    day = ticks[0].ts.date().isoformat()
    gpu = gz_csv(["future", "ts", "util_pct", "gpu_uuid", "memory_used_mb"], gpu_rows)
    proc = gz_csv(["ts", "gpu_uuid", "pid", "mem_used_mb", "loginuid_user"], proc_rows)
    assert (await upload(client, host, "gpu_sample", day, gpu)).status_code == 201
    assert (await upload(client, host, "proc_sample", day, proc)).status_code == 201
    job = await backfill_of(client, tenant, host, day)
    assert (job["status"], job["added"], job["errors"]) == ("done", len(ticks) - 1, 0), job
    # States derived the same way as for the live pushes without usageState.
    assert await rollups(app, host) == await rollups(app, reference)


async def test_day_waits_for_both_tables_and_gpu_names(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)  # never pushed: the board has no GPU names yet
    ticks = make_ticks(yesterday() + timedelta(hours=1), n=10)
    day = ticks[0].ts.date().isoformat()
    gpu, proc = archive_of(ticks)
    assert (await upload(client, host, "gpu_sample", day, gpu)).status_code == 201
    job = await backfill_of(client, tenant, host, day, until=("waiting",))
    assert "proc_sample" in job["reason"]
    assert (await upload(client, host, "proc_sample", day, proc)).status_code == 201
    job = await backfill_of(client, tenant, host, day, until=("waiting",))
    assert "gpu_device" in job["reason"]
    assert (await upload(client, host, "gpu_device", "_full", device_table())).status_code == 201
    job = await backfill_of(client, tenant, host, day)
    assert (job["status"], job["added"]) == ("done", len(ticks))
    hosts = await client.get("/api/v1/workspaces/acme/hosts", headers=tenant.auth())
    [shown] = hosts.json()["hosts"]
    assert [g["name"] for g in shown["gpus"]] == ["NVIDIA RTX A6000"] * 2


async def test_ticks_older_than_raw_retention_are_skipped(
    app: Any, client: httpx.AsyncClient, settings: Any
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    start = yesterday() - timedelta(days=settings.raw_retention_days + 2)
    ticks = make_ticks(start + timedelta(hours=1), n=5)
    await upload_day(client, host, ticks)
    job = await backfill_of(client, tenant, host, ticks[0].ts.date().isoformat())
    assert job["status"] == "done"
    assert (job["added"], job["skippedReasons"]) == (0, {"older_than_raw_retention": 5})
    assert await observation_count(app, host) == 0


async def test_host_archives_is_workspace_scoped(app: Any, client: httpx.AsyncClient) -> None:
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    host = await enroll(client, acme)
    r = await client.get(
        f"/api/v1/workspaces/other/hosts/{host['hostId']}/archives", headers=other.auth()
    )
    assert r.status_code == 404
    r = await client.get(
        f"/api/v1/workspaces/acme/hosts/{host['hostId']}/archives", headers=other.auth()
    )
    assert r.status_code == 404


async def test_revoked_elsewhere_is_refused(app: Any, client: httpx.AsyncClient) -> None:
    """Another board process revoked the host: this one's token cache must not matter."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    assert (await client.get("/agent/v1/archives", headers=bearer(host))).status_code == 200
    runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        await conn.execute(
            "UPDATE hosts SET revoked_at = now() WHERE public_id = %s::uuid", [host["hostId"]]
        )
    assert runtime.agent_tokens  # still cached here
    r = await upload(client, host, "gpu_device", "_full", device_table())
    assert r.status_code == 401
    assert (await client.get("/agent/v1/archives", headers=bearer(host))).status_code == 401


async def test_live_pushes_after_the_backfill_change_nothing(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Order does not matter: the archive first, then the same ticks pushed live (late)."""
    tenant = await make_tenant(app, "acme")
    reference = await enroll(client, tenant, "reference")
    host = await enroll(client, tenant, "host")
    ticks = make_ticks(yesterday() + timedelta(hours=7), n=40)
    await push_all(client, reference, ticks)
    await push_all(client, host, ticks[:1])
    await upload_day(client, host, ticks[:25])
    job = await backfill_of(client, tenant, host, ticks[0].ts.date().isoformat())
    assert job["added"] == 24
    await push_all(client, host, ticks[5:])  # 20 repeats, 15 new
    assert await observation_count(app, host) == len(ticks)
    assert await rollups(app, host) == await rollups(app, reference)
