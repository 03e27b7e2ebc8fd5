"""Raw history on disk, and the readers of it: bytes per observation and per GPU sample,
hot and compacted, the time to compact a day, and the raw readers' latencies.

    .venv/bin/python bench/storage.py [--hosts 8] [--hours 24] [--repeat 40]

Enrolls `--hosts` hosts of 8 GPUs with 2 processes each (16 per observation) and pushes
`--hours` of observations 30 s apart through the board's own ingest path (the app
in-process), on a closed UTC day (two days ago), values that move as real ones do
(utilization and power wander, temperature drifts, memory steps now and then). Then:

- bytes of the raw tables (heap, indexes, TOAST; every partition) after VACUUM, less
  those of the empty schema: "hot";
- compaction of the closed days (board.observations.compaction, when the code has it),
  timed, then the bytes again: "compacted";
- each raw reader `--repeat` times, p50 and p90 in ms: a late point's neighbours, the
  ticks of stored points, a rebuild's read of an hour and of a day, the newest state of
  every host (each host pushed once more now, as a live fleet's newest is hot), and the
  host page's 6 h and 24 h charts over the compacted day.

Runs against whichever code is on sys.path first, so the code before a change is
measured with `PYTHONPATH=<its checkout>` (the readers' signatures are the same).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._common import enroll_in_process, scratch_database, server_url, with_database  # noqa: E402
from board.app import create_app  # noqa: E402
from board.db.migrate import upgrade  # noqa: E402
from board.fleet.history import recent_averages  # noqa: E402
from board.fleet.latest import newest_gpus  # noqa: E402
from board.ingest.history import RawKey, load_ticks, neighbourhoods  # noqa: E402
from board.observations.maintenance import run_maintenance  # noqa: E402
from board.rollups.rebuild import host_ticks  # noqa: E402
from board.settings import Settings  # noqa: E402
from board.workspaces import service as workspaces  # noqa: E402

TICK_SECONDS = 30
GPUS = 8
PROCS_PER_GPU = 2
# Every raw table either layout has; the ones missing in this checkout count 0.
RAW_TABLES = ("host_observations", "gpu_samples", "process_samples", "observation_hours")


class Fleet:
    """Each GPU's state, moved a little every tick (seeded: the same data every run)."""

    def __init__(self, hosts: int) -> None:
        self.rng = random.Random(19)
        self.util = [[self.rng.randint(0, 100) for _ in range(GPUS)] for _ in range(hosts)]
        self.temp = [[self.rng.randint(35, 70) for _ in range(GPUS)] for _ in range(hosts)]
        self.mem = [
            [self.rng.choice((512, 40000, 70000)) for _ in range(GPUS)] for _ in range(hosts)
        ]

    def snapshot(self, host: int, at: datetime) -> dict[str, Any]:
        rng, devices = self.rng, []
        for i in range(GPUS):
            busy = i < 6  # two idle-held cards per host
            u = self.util[host][i] if busy else 0
            u = max(0, min(100, u + rng.randint(-8, 8))) if busy else 0
            self.util[host][i] = u
            self.temp[host][i] = max(30, min(85, self.temp[host][i] + rng.randint(-1, 1)))
            if rng.random() < 0.02:
                self.mem[host][i] = rng.choice((512, 40000, 70000)) + rng.randint(0, 999)
            devices.append(
                {
                    "index": i,
                    "uuid": f"GPU-{host:04x}{i:04x}-0000-0000-0000-000000000000",
                    "name": "NVIDIA H100 80GB HBM3",
                    "memoryTotalMb": 81559,
                    "utilPct": u,
                    "memoryUsedMb": self.mem[host][i],
                    "temperatureC": self.temp[host][i],
                    "powerW": 70 + 4 * u + rng.randint(0, 30),
                    "processes": [
                        {
                            "pid": 10000 + 100 * i + p,
                            "linuxUser": f"user{(host + i) % 7}",
                            "name": "python train.py" if p == 0 else "python -m torch.distributed",
                            "type": "compute",
                            "memoryUsedMb": self.mem[host][i] // PROCS_PER_GPU,
                        }
                        for p in range(PROCS_PER_GPU)
                    ],
                    "usageState": ("active" if u > 10 else "idle_held") if busy else "idle_held",
                }
            )
        return {
            "schemaVersion": "availability.snapshot.v1",
            "collectionStatus": "ok",
            "observedAt": at.isoformat(),
            "host": {
                "hostname": f"gpu-{host}",
                "agentVersion": "1.8.0",
                "driverVersion": "560.35.05",
            },
            "gpus": devices,
            "errors": [],
        }


async def fill(url: str, hosts: int, start: datetime, hours: float) -> tuple[int, Any]:
    settings = Settings(database_url=url, data_dir=Path(tempfile.mkdtemp(prefix="gua-storage-")))
    app = create_app(settings, run_maintenance=False)
    fleet = Fleet(hosts)
    pushed = 0
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        async with runtime.sessions() as session:
            workspace = await workspaces.create_workspace(session, "storage", "Storage")
            admin = await workspaces.add_member(
                session, workspace, "a@storage.example", "admin", None
            )
            await session.commit()
        auth = {"Authorization": f"Bearer {admin.api_token}"}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://storage") as c:
            tokens = await enroll_in_process(c, "storage", auth, hosts)

            async def tick(at: datetime) -> int:
                answers = await asyncio.gather(
                    *(
                        c.post(
                            "/agent/v1/observations",
                            json=fleet.snapshot(n, at),
                            headers={"Authorization": f"Bearer {token}"},
                        )
                        for n, token in enumerate(tokens)
                    )
                )
                assert all(a.status_code == 202 for a in answers), answers[0].text
                return len(answers)

            for t in range(int(hours * 3600 / TICK_SECONDS)):
                pushed += await tick(start + timedelta(seconds=t * TICK_SECONDS))
            # The newest observation of a live host is recent (hot), whatever the layout.
            pushed += await tick(datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5))
    return pushed, workspace


@contextlib.contextmanager
def kept_database(prefix: str) -> Iterator[str]:
    """A fresh database left in place afterwards (its name is printed)."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    print(f"kept database {name}")
    yield with_database(server_url(), name)


def raw_bytes(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        out = {}
        for table in RAW_TABLES:
            kind = conn.execute(
                "SELECT relkind FROM pg_class WHERE relname = %s", [table]
            ).fetchone()
            if kind is None or kind[0] not in ("p", "r"):  # missing, or a view over the others
                out[table] = 0
                continue
            # A partitioned table's size is its partitions'; a plain one's is its own.
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) "
                "FROM pg_partition_tree(%s::regclass) WHERE isleaf",
                [table],
            ).fetchone()
            if kind[0] == "r":
                row = conn.execute(
                    "SELECT pg_total_relation_size(%s::regclass)", [table]
                ).fetchone()
            out[table] = int(row[0]) if row else 0
    return out


async def compact(url: str) -> tuple[float, str]:
    try:
        from board.observations.compaction import compact_closed_days
    except ImportError:
        return 0.0, "no compaction in this code"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        result = await compact_closed_days(conn)
        took = time.perf_counter() - t0
    return took, f"{result.observations} observations into {result.hours} host hours"


async def timed(repeat: int, call: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    await call()  # warm
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await call()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.9 * len(times)))]


async def readers(
    url: str, day: datetime, hours: float, repeat: int
) -> dict[str, tuple[float, float]]:
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    from board.db.urls import sqlalchemy_url

    rng = random.Random(7)
    out: dict[str, tuple[float, float]] = {}
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT workspace_id, id FROM hosts ORDER BY id")
        hosts = [(int(w), int(h)) for w, h in await cur.fetchall()]
        span = int(hours * 3600)

        def late_point() -> RawKey:
            ws, host = rng.choice(hosts)
            return RawKey(ws, host, day + timedelta(seconds=rng.randrange(span - 60) + 15))

        def stored_point() -> RawKey:
            ws, host = rng.choice(hosts)
            at = rng.randrange(span // TICK_SECONDS) * TICK_SECONDS
            return RawKey(ws, host, day + timedelta(seconds=at))

        async def neighbours() -> None:
            await neighbourhoods(conn, [late_point()])

        async def ticks() -> None:
            await load_ticks(conn, [stored_point()])

        async def rebuild_hour() -> None:
            ws, host = rng.choice(hosts)
            lo = day + timedelta(hours=rng.randrange(max(1, int(hours))))
            await host_ticks(conn, ws, host, lo, lo + timedelta(hours=1))

        async def rebuild_day() -> None:
            ws, host = rng.choice(hosts)
            await host_ticks(conn, ws, host, day, day + timedelta(days=1))

        out["late point: neighbours"] = await timed(repeat, neighbours)
        out["stored point: ticks"] = await timed(repeat, ticks)
        out["rebuild read: 1 host-hour"] = await timed(repeat, rebuild_hour)
        out["rebuild read: 1 host-day"] = await timed(max(5, repeat // 4), rebuild_day)
        await conn.rollback()

    engine = create_async_engine(sqlalchemy_url(url))
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    try:
        async with sessions() as session:
            ws = hosts[0][0]

            async def newest() -> None:
                await newest_gpus(session, ws, [h for _, h in hosts])

            def chart(window: timedelta, step: timedelta) -> Callable[[], Awaitable[Any]]:
                async def call() -> None:
                    _, host = rng.choice(hosts)
                    start = day + timedelta(
                        hours=rng.randrange(max(1, int(hours - window / timedelta(hours=1)) + 1))
                    )
                    await recent_averages(session, ws, host, start, start + window, step)

                return call

            out[f"newest state: {len(hosts)} hosts"] = await timed(repeat, newest)
            out["host page: 6 h chart"] = await timed(
                repeat, chart(timedelta(hours=6), timedelta(minutes=5))
            )
            out["host page: 24 h chart"] = await timed(
                max(5, repeat // 2), chart(timedelta(hours=min(24, hours)), timedelta(minutes=15))
            )
    finally:
        await engine.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()
    import board

    print(f"code: {Path(board.__file__).resolve().parent}")
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
    with kept_database("gua_storage") if args.keep else scratch_database("gua_storage") as url:
        upgrade(url)

        async def partitions() -> None:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await run_maintenance(conn, retention_days=35, ahead_days=3)

        asyncio.run(partitions())
        empty = raw_bytes(url)
        t0 = time.perf_counter()
        pushed, _ = asyncio.run(fill(url, args.hosts, day, args.hours))
        print(f"pushed {pushed} observations in {time.perf_counter() - t0:.0f} s")
        hot = raw_bytes(url)
        took, what = asyncio.run(compact(url))
        packed = raw_bytes(url)
        read = asyncio.run(readers(url, day, args.hours, args.repeat))

    observations = args.hosts * int(args.hours * 3600 / TICK_SECONDS)  # the closed day's
    live = pushed - observations  # one hot observation per host, now

    def line(name: str, sizes: dict[str, int]) -> None:
        total = sum(sizes[t] - empty[t] for t in RAW_TABLES)
        per_obs = total / pushed
        print(
            f"{name:<10} {total:>12,} B  {per_obs:>7.0f} B/observation  "
            f"{per_obs / GPUS:>6.1f} B/GPU sample   "
            + ", ".join(f"{t} {sizes[t] - empty[t]:,}" for t in RAW_TABLES if sizes[t] != empty[t])
        )

    print(
        f"{args.hosts} hosts x {GPUS} GPUs x {PROCS_PER_GPU} processes, {args.hours:g} h at "
        f"{TICK_SECONDS} s on a closed day ({observations} observations) + {live} live"
    )
    line("hot", hot)
    line("compacted", packed)
    print(f"compaction: {took:.2f} s ({what})")
    print(f"{'reader':<28} {'p50 ms':>8} {'p90 ms':>8}")
    for name, (p50, p90) in read.items():
        print(f"{name:<28} {p50:>8.2f} {p90:>8.2f}")


if __name__ == "__main__":
    main()
