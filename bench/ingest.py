"""Ingest benchmark: the real board (2 uvicorn workers) on a real PostgreSQL, many agents.

    .venv/bin/python bench/ingest.py [--hosts 300] [--seconds 20] [--concurrency 96]
                                     [--bookings] [--jobs] [--jobs-edge]

What it does:
1. creates a scratch database on GUA_BOARD_DATABASE_URL's server (else the local
   PostgreSQL), migrates it, creates the partitions, a workspace and an admin;
2. starts `gua-board serve --workers 2` on a free loopback port, enrolls --hosts hosts
   through the API (enrollment token via REST with the admin's PAT, then the claim);
3. pushes 8-GPU, 16-process snapshots (each host: one push in flight at a time, a new
   observedAt each push, increasing, near now) from --concurrency concurrent requests
   for --warmup + --seconds, and measures the last --seconds;
4. checks that every 202 is durable: rows in host_observations == 202s - duplicates;
5. the floor: a bare FastAPI app (2 workers) that only validates the same payload,
   measured with the same load generator (--skip-floor to leave it out);
6. prints a summary table. Exit status 1 when the durability check fails.

--bookings: before the load, each host reports once and all 8 of its GPUs are booked
(REST, by the admin, for alice) for a day, so every batch credits the reservation
figures too (compare with a run without it). The bookings are then moved to start at
the previous whole hour (in the database: the API refuses a start in the past; only one
observation per host is stored, so nothing needs re-crediting), so the load falls in
hours wholly inside them, as 22 of a day-long booking's 24 hours do. With
--bookings-edge they start this minute instead: the load falls in each booking's partial
first hour (a figure row per booked GPU and hour, the worst case).

--jobs: before the load, each host reports once, then a running scheduler job (one per
GPU, started at the previous whole hour, the host a cluster host since then) holds each
of its GPUs, so every batch credits job figures and the time outside jobs too. The jobs
are written in the database directly (as board.jobs.recording would; only one
observation per host is stored, so nothing needs re-crediting). The load then falls in
hours wholly inside the jobs, kept on the GPU-hour rows, as most of a long job's hours
are. With --jobs-edge they start this minute instead: the load falls in each job's
partial first hour (a figure row per job, GPU and hour, the worst case).

The load generator is one process (asyncio on uvloop when installed, a minimal keep-alive
HTTP/1.1 client; `--client httpx` to compare), because the machine is small and shared with
the server and PostgreSQL; its CPU use is printed so the numbers can be read with that in
mind. Enrollment uses httpx.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import secrets
import ssl
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg


def _sniffio_shim() -> None:
    """httpcore imports sniffio on every lock it makes; anyio >= 4.12 no longer brings it.

    Each failed import walks sys.path (~0.3 ms, several per request), which made the
    load generator, not the board, the bottleneck. We only ever run under asyncio.
    """
    try:
        import sniffio  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        import types

        shim = types.ModuleType("sniffio")
        shim.current_async_library = lambda: "asyncio"  # type: ignore[attr-defined]
        sys.modules["sniffio"] = shim


_sniffio_shim()

import httpx  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402  (bench/ is not a package; see sys.path above)
    Server,
    TreeSampler,
    backend_pids,
    cpu_delta,
    cpu_seconds,
    free_port,
    machine_busy_seconds,
    scratch_database,
    server_version,
    start_server,
    stop_server,
    venv_script,
    wait_healthy,
)

T = TypeVar("T")

TARGET_RATE = 1500.0
TARGET_P99_MS = 150.0
GPUS = 8
PROCS_PER_GPU = 2
WORKSPACE = "bench"


def run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, on uvloop when it is there (the load generator is CPU-bound)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


# --- payloads -------------------------------------------------------------------------


def snapshot(hostname: str) -> dict[str, Any]:
    """An 8-GPU, 16-process 1.8.0 snapshot, shaped like observation-1.8.0-fake.json."""
    gpus = []
    for i in range(GPUS):
        kind = i % 4
        if kind == 3:  # a display GPU: graphics processes only, so `idle`
            state, util, procs = "idle", 0, [("gdm", "Xorg", "graphics", 128)] * PROCS_PER_GPU
        elif kind == 2:  # memory held, no work
            state, util = "idle_held", 2
            procs = [("bob", "jupyter", "compute", 8000)] * PROCS_PER_GPU
        else:
            state, util = "active", 85
            procs = [("alice", "python", "compute", 20000)] * PROCS_PER_GPU
        used = min(49140, sum(p[3] for p in procs) + 300)
        gpus.append(
            {
                "index": i,
                "uuid": f"GPU-{i}",
                "name": "NVIDIA RTX A6000",
                "memoryTotalMb": 49140,
                "utilPct": util,
                "memoryUsedMb": used,
                "temperatureC": 40 + util // 2,
                "powerW": 70 + util,
                "processes": [
                    {
                        "pid": 1000 + 10 * i + j,
                        "linuxUser": user,
                        "name": name,
                        "type": ptype,
                        "memoryUsedMb": mem,
                    }
                    for j, (user, name, ptype, mem) in enumerate(procs)
                ],
                "usageState": state,
            }
        )
    return {
        "schemaVersion": "availability.snapshot.v1",
        "collectionStatus": "ok",
        "observedAt": "@OBSERVED_AT@",
        "host": {
            "hostname": hostname,
            "agentVersion": "1.8.0",
            "driverVersion": "560.35.05",
            "hostId": hostname,
            "displayName": hostname,
        },
        "gpus": gpus,
        "errors": [],
    }


@dataclass
class Agent:
    """One enrolled host: its token, its body around observedAt, its newest time."""

    token: str
    head: bytes
    tail: bytes
    last_us: int = 0
    host_id: str = ""  # the board's id of the host (--bookings books it)

    @classmethod
    def of(cls, token: str, hostname: str) -> Agent:
        # The agent serialises with json.dumps defaults; so do we.
        head, tail = json.dumps(snapshot(hostname)).encode().split(b"@OBSERVED_AT@")
        return cls(token, head, tail)

    def next_body(self) -> bytes:
        now_us = time.time_ns() // 1000
        self.last_us = max(now_us, self.last_us + 1)
        stamp = datetime.fromtimestamp(self.last_us / 1e6, UTC).isoformat()
        return self.head + stamp.encode() + self.tail


# --- the load generator ---------------------------------------------------------------


@dataclass
class LoadResult:
    name: str
    seconds: float
    statuses: Counter[str] = field(default_factory=Counter)  # in the measured window
    latencies: list[float] = field(default_factory=list)  # of 202s in the window, seconds
    accepted_total: int = 0  # 202s over the whole run, warm-up included
    duplicates_total: int = 0
    peak_rss: int = 0
    server_procs: int = 0
    cpu_server: float = 0.0  # CPU seconds in the window
    cpu_postgres: float = 0.0
    cpu_loadgen: float = 0.0
    cpu_machine: float = 0.0  # the whole box, other people's work included
    durable: dict[str, int] = field(default_factory=dict)

    @property
    def accepted(self) -> int:
        return self.statuses.get("202", 0)

    @property
    def rate(self) -> float:
        return self.accepted / self.seconds

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    @property
    def errors(self) -> dict[str, int]:
        return {k: v for k, v in sorted(self.statuses.items()) if k != "202"}


class RawConnection:
    """A minimal HTTP/1.1 keep-alive client: one connection, one request at a time.

    httpx costs ~1.3 ms of CPU per request on this machine (about 1,000 requests/s
    for a whole core), so with only two cores it would starve the server it measures.
    This one costs a few tens of microseconds. It only handles what the board answers:
    a status line, headers with Content-Length, a body.
    """

    def __init__(self, host: str, port: int) -> None:
        self._host, self._port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, token: str, body: bytes) -> tuple[int, bytes]:
        if self._writer is None or self._reader is None:
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
        request = (
            f"POST {path} HTTP/1.1\r\nHost: {self._host}:{self._port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        try:
            self._writer.write(request + body)
            head = await self._reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length, close = 0, False
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and value.strip().lower() == b"close":
                    close = True
                elif name == b"transfer-encoding":
                    raise RuntimeError("chunked responses are not supported")
            content = await self._reader.readexactly(length)
        except BaseException:
            await self.close()
            raise
        if close:
            await self.close()
        return status, content

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


class HttpxConnection:
    """The same through httpx, one keep-alive connection per worker (for comparison).

    A single shared pool is worse still: httpcore scans every pooled connection on
    each request.
    """

    def __init__(self, base_url: str, tls: ssl.SSLContext) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        self._client = httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60.0, verify=tls)

    async def post(self, path: str, token: str, body: bytes) -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        response = await self._client.post(path, content=body, headers=headers)
        return response.status_code, response.content

    async def close(self) -> None:
        await self._client.aclose()


async def generate_load(
    base_url: str,
    agents: list[Agent],
    *,
    client: str,
    concurrency: int,
    warmup: float,
    seconds: float,
    result: LoadResult,
    sampler: TreeSampler,
    database_url: str | None,
) -> None:
    """--concurrency requests in flight; each host has at most one of them at a time."""
    idle: asyncio.Queue[Agent] = asyncio.Queue()
    for agent in agents:
        idle.put_nowait(agent)
    clock = time.perf_counter  # uvloop's loop.time() only has millisecond resolution
    start = clock()
    window_start, window_end = start + warmup, start + warmup + seconds
    path = "/agent/v1/observations"
    parts = urlsplit(base_url)
    tls = ssl.create_default_context()  # plain HTTP; made once rather than per client

    async def worker() -> None:
        conn: RawConnection | HttpxConnection = (
            RawConnection(parts.hostname or "127.0.0.1", parts.port or 80)
            if client == "raw"
            else HttpxConnection(base_url, tls)
        )
        try:
            while clock() < window_end:
                agent = await idle.get()
                body = agent.next_body()
                t0 = clock()
                try:
                    code, content = await conn.post(path, agent.token, body)
                    status, duplicate = str(code), b'"duplicate":true' in content
                except (OSError, EOFError, ValueError, RuntimeError, httpx.HTTPError) as exc:
                    status, duplicate = type(exc).__name__, False
                t1 = clock()
                idle.put_nowait(agent)
                if status == "202":
                    result.accepted_total += 1
                    result.duplicates_total += duplicate
                if window_start <= t1 < window_end:
                    result.statuses[status] += 1
                    if status == "202":
                        result.latencies.append(t1 - t0)
        finally:
            await conn.close()

    async def window_marks() -> None:
        """CPU snapshots of server, PostgreSQL backends and us at the window's edges."""
        await asyncio.sleep(window_start - clock())
        pg = await asyncio.to_thread(_pg_procs, database_url)
        before = (sampler.cpu(), cpu_seconds(pg), time.process_time(), machine_busy_seconds())
        await asyncio.sleep(window_end - clock())
        pg.update(await asyncio.to_thread(_pg_procs, database_url))
        result.cpu_server = cpu_delta(before[0], sampler.cpu())
        result.cpu_postgres = cpu_delta(before[1], cpu_seconds(pg))
        result.cpu_loadgen = time.process_time() - before[2]
        result.cpu_machine = machine_busy_seconds() - before[3]

    marks = asyncio.create_task(window_marks())
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    await marks


def _pg_procs(database_url: str | None) -> dict[int, Any]:
    if database_url is None:
        return {}
    import psutil  # type: ignore[import-untyped]

    procs: dict[int, Any] = {}
    for pid in backend_pids(database_url):
        try:
            procs[pid] = psutil.Process(pid)
        except psutil.Error:
            pass
    return procs


# --- setting up the board -------------------------------------------------------------


async def prepare_database(url: str) -> str:
    """Partitions, a workspace and its admin; the admin's personal API token."""
    from board.db.engine import make_engine, make_sessionmaker
    from board.observations.maintenance import run_maintenance
    from board.settings import Settings
    from board.workspaces import service

    settings = Settings(database_url=url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await run_maintenance(
            conn,
            retention_days=settings.raw_retention_days,
            ahead_days=settings.partitions_ahead_days,
        )
    engine = make_engine(url, pool_size=1)
    try:
        async with make_sessionmaker(engine)() as session:
            workspace = await service.create_workspace(session, WORKSPACE, "Benchmark")
            admin = await service.add_member(
                session, workspace, "admin@bench.example", "admin", None
            )
            await session.commit()
            return admin.api_token
    finally:
        await engine.dispose()


async def book_every_host(base_url: str, admin_token: str, agents: list[Agent]) -> int:
    """--bookings: each host reports once (its GPUs become known), then all of its GPUs
    are booked from this minute for a day; the number of bookings made."""
    admin = {"Authorization": f"Bearer {admin_token}"}
    start = datetime.now(UTC).replace(second=0, microsecond=0)
    end = start + timedelta(days=1)
    gate = asyncio.Semaphore(8)
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as client:

        async def one(agent: Agent) -> None:
            async with gate:
                pushed = await client.post(
                    "/agent/v1/observations",
                    content=agent.next_body(),
                    headers={
                        "Authorization": f"Bearer {agent.token}",
                        "Content-Type": "application/json",
                    },
                )
                if pushed.status_code != 202:
                    raise RuntimeError(f"first push: {pushed.status_code} {pushed.text}")
                booked = await client.post(
                    f"/api/v1/workspaces/{WORKSPACE}/reservations",
                    json={
                        "hostId": agent.host_id,
                        "start": start.isoformat(),
                        "end": end.isoformat(),
                        "linuxUsers": ["alice"],
                        "note": "bench",
                    },
                    headers=admin,
                )
                if booked.status_code != 201:
                    raise RuntimeError(f"book: {booked.status_code} {booked.text}")

        await asyncio.gather(*(one(a) for a in agents))
    return len(agents)


async def start_bookings_an_hour_back(url: str) -> None:
    """--bookings: every booking starts at the previous whole hour (see the docstring)."""
    moved = "tstzrange(date_trunc('hour', lower(during)) - interval '1 hour', upper(during))"
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await conn.execute(f"UPDATE reservations SET during = {moved}")
        await conn.execute(f"UPDATE reservation_gpus SET during = {moved}")


_JOBS_AN_HOUR_BACK = """
    INSERT INTO scheduler_jobs (workspace_id, public_id, cluster, raw_job_id, job_id,
        linux_user, state, started_at)
    SELECT g.workspace_id, gen_random_uuid(), 'bench', g.id::text, g.id::text, 'alice',
           'RUNNING', {START}
    FROM gpus g;
    INSERT INTO job_gpus (workspace_id, job_id, host_id, device, during, linux_user)
    SELECT j.workspace_id, j.id, g.host_id, g.gpu_index, tstzrange(j.started_at, NULL),
           j.linux_user
    FROM scheduler_jobs j JOIN gpus g ON g.id::text = j.raw_job_id;
    INSERT INTO cluster_hosts (workspace_id, host_id, cluster, since)
    SELECT workspace_id, id, 'bench', {START} FROM hosts;
"""


async def report_once(base_url: str, agents: list[Agent]) -> int:
    """--jobs: each host reports once (its GPUs become known); the pushes stored."""
    gate = asyncio.Semaphore(8)
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as client:

        async def one(agent: Agent) -> None:
            async with gate:
                pushed = await client.post(
                    "/agent/v1/observations",
                    content=agent.next_body(),
                    headers={
                        "Authorization": f"Bearer {agent.token}",
                        "Content-Type": "application/json",
                    },
                )
                if pushed.status_code != 202:
                    raise RuntimeError(f"first push: {pushed.status_code} {pushed.text}")

        await asyncio.gather(*(one(a) for a in agents))
    return len(agents)


def jobs_on_every_gpu_sql(edge: bool = False) -> str:
    """The statements of a running job on each GPU, from the previous whole hour, or
    (`edge`) from this minute (see the docstring)."""
    start = "date_trunc('minute', now())"
    if not edge:
        start = "date_trunc('hour', now()) - interval '1 hour'"
    return _JOBS_AN_HOUR_BACK.replace("{START}", start)


async def run_jobs_on_every_gpu(url: str, edge: bool = False) -> None:
    """--jobs (--jobs-edge): a running job on each GPU."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        for statement in jobs_on_every_gpu_sql(edge).split(";"):
            if statement.strip():
                await conn.execute(statement)


async def enroll_hosts(base_url: str, admin_token: str, count: int) -> list[Agent]:
    """Each host the way an admin and an agent do it: issue a token (REST), claim it."""
    admin = {"Authorization": f"Bearer {admin_token}"}
    gate = asyncio.Semaphore(8)

    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as client:

        async def one(i: int) -> Agent:
            hostname = f"bench-{i:04d}"
            async with gate:
                issued = await client.post(
                    f"/api/v1/workspaces/{WORKSPACE}/enrollment-tokens",
                    json={"displayName": hostname},
                    headers=admin,
                )
                if issued.status_code != 201:
                    raise RuntimeError(f"issue token: {issued.status_code} {issued.text}")
                claimed = await client.post(
                    "/agent/v1/enrollments/claim",
                    json={
                        "enrollmentToken": issued.json()["enrollmentToken"],
                        "hostname": hostname,
                        "agentVersion": "1.8.0",
                        "driverVersion": "560.35.05",
                    },
                )
                if claimed.status_code != 201:
                    raise RuntimeError(f"claim: {claimed.status_code} {claimed.text}")
            agent = Agent.of(claimed.json()["agentToken"], hostname)
            agent.host_id = claimed.json()["hostId"]
            return agent

        return list(await asyncio.gather(*(one(i) for i in range(count))))


def count_rows(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        out = {}
        for table in ("host_observations", "gpu_samples", "process_samples"):
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            out[table] = int(row[0]) if row else -1
        return out


def measure(
    server: Server,
    agents: list[Agent],
    args: argparse.Namespace,
    database_url: str | None,
) -> LoadResult:
    result = LoadResult(server.name, args.seconds)
    sampler = TreeSampler(server.proc.pid)
    sampler.start()
    try:
        run(
            generate_load(
                server.base_url,
                agents,
                client=args.client,
                concurrency=args.concurrency,
                warmup=args.warmup,
                seconds=args.seconds,
                result=result,
                sampler=sampler,
                database_url=database_url,
            )
        )
    finally:
        sampler.stop()
    result.peak_rss, result.server_procs = sampler.peak_rss, sampler.peak_procs
    return result


def bench_board(url: str, args: argparse.Namespace, log_dir: Path) -> LoadResult:
    from board.db.migrate import upgrade

    upgrade(url)
    admin_token = run(prepare_database(url))
    port = free_port()
    env = {
        **os.environ,
        "GUA_BOARD_DATABASE_URL": url,
        "GUA_BOARD_DATA_DIR": str(log_dir / "data"),
        "GUA_BOARD_SECRET_KEY": secrets.token_urlsafe(48),
        "GUA_BOARD_LOG_LEVEL": "warning",
    }
    argv = [venv_script("gua-board"), "serve", "--workers", "2", "--port", str(port)]
    server = start_server("board", argv, env, port, log_dir)
    try:
        wait_healthy(server)
        t0 = time.monotonic()
        agents = run(enroll_hosts(server.base_url, admin_token, args.hosts))
        print(f"enrolled {len(agents)} hosts in {time.monotonic() - t0:.1f}s", file=sys.stderr)
        made = 0
        if args.bookings or args.bookings_edge:
            made = run(book_every_host(server.base_url, admin_token, agents))
            if not args.bookings_edge:
                run(start_bookings_an_hour_back(url))
            print(f"booked all GPUs of {made} hosts for a day", file=sys.stderr)
        if args.jobs or args.jobs_edge:
            if not made:
                made = run(report_once(server.base_url, agents))
            run(run_jobs_on_every_gpu(url, edge=args.jobs_edge))
            print(f"a running job on every GPU of {len(agents)} hosts", file=sys.stderr)
        result = measure(server, agents, args, url)
        result.accepted_total += made  # each booked host's first push is stored too
        # Before the board stops: a 202 must mean the rows are already committed.
        result.durable = count_rows(url)
        if args.jobs or args.jobs_edge:
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*), coalesce(sum(covered_us), 0)::bigint FROM job_hours"
                ).fetchone()
            assert row is not None
            print(f"job figures: {row[0]} rows, {row[1] / 3.6e9:.2f} GPU-hours", file=sys.stderr)
        if server.proc.poll() is not None:
            raise RuntimeError(f"the board died during the run:\n{server.log_tail()}")
        return result
    finally:
        stop_server(server)


def bench_floor(agents: list[Agent], args: argparse.Namespace, log_dir: Path) -> LoadResult:
    port = free_port()
    argv = [
        sys.executable,
        *("-m", "uvicorn", "--app-dir", str(Path(__file__).resolve().parent)),
        *("_common:create_floor_app", "--factory", "--workers", "2"),
        *("--host", "127.0.0.1", "--port", str(port), "--no-access-log", "--log-level", "warning"),
    ]
    server = start_server("floor", argv, dict(os.environ), port, log_dir)
    try:
        wait_healthy(server)
        return measure(server, agents, args, None)
    finally:
        stop_server(server)


# --- reporting ------------------------------------------------------------------------


def durability(result: LoadResult) -> tuple[bool, str]:
    stored = result.durable.get("host_observations", -1)
    expected = result.accepted_total - result.duplicates_total
    ok = (
        stored == expected
        and result.duplicates_total == 0
        and result.durable.get("gpu_samples") == stored * GPUS
        and result.durable.get("process_samples") == stored * GPUS * PROCS_PER_GPU
    )
    text = (
        f"202s {result.accepted_total} (duplicates {result.duplicates_total}), rows "
        f"host_observations {stored}, gpu_samples {result.durable.get('gpu_samples')}, "
        f"process_samples {result.durable.get('process_samples')}"
    )
    return ok, text


def report(results: list[LoadResult], args: argparse.Namespace, pg_version: str) -> None:
    print()
    print(
        f"machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
        f"PostgreSQL {pg_version}, Python {platform.python_version()}"
    )
    print(
        f"load: {args.hosts} hosts, {GPUS} GPUs x {PROCS_PER_GPU} processes each, "
        f"concurrency {args.concurrency}, warm-up {args.warmup:g}s, measured {args.seconds:g}s"
    )
    header = (
        f"{'':<6} {'obs/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'peak RSS':>9} {'srv':>5} "
        f"{'pg':>5} {'gen':>5} {'other':>5} {'srv ms/obs':>10}  errors"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        mine = r.cpu_server + r.cpu_postgres + r.cpu_loadgen
        cores = [c / r.seconds for c in (r.cpu_server, r.cpu_postgres, r.cpu_loadgen)]
        other = max(0.0, r.cpu_machine - mine) / r.seconds
        per_obs = r.cpu_server / r.accepted * 1000 if r.accepted else float("nan")
        pg = f"{cores[1]:.2f}" if r.name == "board" else "-"
        errors = ", ".join(f"{k}: {v}" for k, v in r.errors.items()) or "none"
        print(
            f"{r.name:<6} {r.rate:>7.0f} {r.percentile(0.5):>7.1f} {r.percentile(0.99):>7.1f} "
            f"{r.peak_rss / 2**20:>6.0f}MiB {cores[0]:>5.2f} {pg:>5} {cores[2]:>5.2f} "
            f"{other:>5.2f} {per_obs:>10.2f}  {errors}"
        )
    print(
        "(srv/pg/gen/other: cores busy on average in the window: the server's processes, its\n"
        " PostgreSQL backends, the load generator, everything else on the machine; srv ms/obs:\n"
        " server CPU per accepted observation; peak RSS: uvicorn master + workers, summed)"
    )
    board = next((r for r in results if r.name == "board"), None)
    if board is not None:
        ok, text = durability(board)
        print(f"durability: {'OK' if ok else 'FAILED'}: {text}")
        met = board.rate >= TARGET_RATE and board.percentile(0.99) < TARGET_P99_MS
        print(
            f"target (>= {TARGET_RATE:.0f} obs/s, p99 < {TARGET_P99_MS:.0f} ms): "
            f"{'met' if met else 'NOT met'}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=300, help="hosts to enroll (default 300)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time (default 20)")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured lead-in (3)")
    parser.add_argument(
        "--concurrency", type=int, default=96, help="requests in flight (default 96)"
    )
    parser.add_argument(
        "--client",
        choices=["raw", "httpx"],
        default="raw",
        help="load generator's HTTP client (default raw: httpx needs ~1.3 ms CPU a request)",
    )
    parser.add_argument("--skip-floor", action="store_true", help="do not measure the floor")
    parser.add_argument(
        "--bookings",
        action="store_true",
        help="book every host's GPUs for the run (reservation figures credited per batch)",
    )
    parser.add_argument(
        "--bookings-edge",
        action="store_true",
        help="as --bookings, but the load falls in each booking's partial first hour",
    )
    parser.add_argument(
        "--jobs",
        action="store_true",
        help="a running scheduler job on every GPU (job figures credited per batch)",
    )
    parser.add_argument(
        "--jobs-edge",
        action="store_true",
        help="as --jobs, but the load falls in each job's partial first hour",
    )
    args = parser.parse_args(argv)
    if args.concurrency > args.hosts:
        parser.error("--concurrency cannot exceed --hosts (one push in flight per host)")

    results: list[LoadResult] = []
    with tempfile.TemporaryDirectory(prefix="gua-bench-") as tmp, scratch_database() as url:
        pg_version = server_version(url)
        log_dir = Path(tmp)
        board = bench_board(url, args, log_dir)
        results.append(board)
        if not args.skip_floor:
            agents = [Agent.of("gua_agent_floor", f"bench-{i:04d}") for i in range(args.hosts)]
            results.append(bench_floor(agents, args, log_dir))
    report(results, args, pg_version)
    return 0 if durability(board)[0] else 1


if __name__ == "__main__":
    sys.exit(main())
