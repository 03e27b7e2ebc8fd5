"""Disk per host per day: raw history and rollups, measured on a scratch database.

Enrolls `--hosts` hosts of `--gpus` GPUs (one process each, half of them busy), pushes
`--hours` of observations 30 s apart (the agent's default) through the board's own
ingest path (the app in-process), then reads the tables' sizes (heap, indexes, TOAST;
all partitions) after VACUUM ANALYZE, less those of the empty schema (the empty
partitions' pages), and scales them to one host and one day. Rollup rows are updated on
every push during their hour, so their files hold dead space until the hour is past;
`compact` is their size after VACUUM FULL, what a long run settles near (later hours
reuse the space freed in earlier ones).

    .venv/bin/python bench/sizing.py --hosts 8 --gpus 8 --hours 6
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import enroll_in_process, scratch_database  # noqa: E402
from board.app import create_app  # noqa: E402
from board.db.migrate import upgrade  # noqa: E402
from board.observations.maintenance import run_maintenance  # noqa: E402
from board.rollups.daily import refresh_day_rollups  # noqa: E402
from board.settings import Settings  # noqa: E402
from board.workspaces import service as workspaces  # noqa: E402

# The hot rows and the compacted hours (bench/storage.py measures compaction itself).
RAW = ("host_observations", "observation_hours")
ROLLUPS = (
    "gpu_hour_rollups",
    "user_hour_rollups",
    "host_hour_rollups",
    "gpu_day_rollups",
    "user_day_rollups",
    "user_day_totals",
)
TICK_SECONDS = 30


def snapshot(at: datetime, gpus: int, tick: int) -> dict[str, Any]:
    devices = []
    for i in range(gpus):
        busy = (i + tick // 20) % 2 == 0
        devices.append(
            {
                "index": i,
                "uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000",
                "name": "NVIDIA H100 80GB HBM3",
                "memoryTotalMb": 81559,
                "utilPct": 93 if busy else 0,
                "memoryUsedMb": 60000 if busy else 512,
                "temperatureC": 61,
                "powerW": 420 if busy else 70,
                "processes": [
                    {
                        "pid": 4000 + i,
                        "linuxUser": f"user{i % 4}",
                        "name": "python",
                        "type": "compute",
                        "memoryUsedMb": 59000 if busy else 400,
                    }
                ],
                "usageState": "active" if busy else "idle_held",
            }
        )
    return {
        "schemaVersion": "availability.snapshot.v1",
        "collectionStatus": "ok",
        "observedAt": at.isoformat(),
        "host": {"hostname": "h", "agentVersion": "1.8.0", "driverVersion": "560.35.05"},
        "gpus": devices,
        "errors": [],
    }


async def fill(url: str, hosts: int, gpus: int, hours: float) -> int:
    settings = Settings(database_url=url, data_dir=Path(tempfile.mkdtemp(prefix="gua-sizing-")))
    app = create_app(settings, run_maintenance=False)
    pushed = 0
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        async with runtime.sessions() as session:
            workspace = await workspaces.create_workspace(session, "sizing", "Sizing")
            admin = await workspaces.add_member(
                session, workspace, "a@sizing.example", "admin", None
            )
            await session.commit()
        auth = {"Authorization": f"Bearer {admin.api_token}"}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sizing") as c:
            tokens = await enroll_in_process(c, "sizing", auth, hosts)
            ticks = int(hours * 3600 / TICK_SECONDS)
            start = datetime.now(UTC) - timedelta(hours=hours)
            for tick in range(ticks):
                at = start + timedelta(seconds=tick * TICK_SECONDS)
                answers = await asyncio.gather(
                    *(
                        c.post(
                            "/agent/v1/observations",
                            json=snapshot(at, gpus, tick),
                            headers={"Authorization": f"Bearer {token}"},
                        )
                        for token in tokens
                    )
                )
                assert all(a.status_code == 202 for a in answers), answers[0].text
                pushed += len(answers)
    return pushed


def sizes(url: str, full: bool = False) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM FULL ANALYZE" if full else "VACUUM ANALYZE")
        out = {}
        for table in RAW + ROLLUPS:
            # A partitioned table's size is its partitions'; a plain one's is its own.
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) "
                "FROM pg_partition_tree(%s::regclass) WHERE isleaf",
                [table],
            ).fetchone()
            if table in ROLLUPS:
                row = conn.execute(
                    "SELECT pg_total_relation_size(%s::regclass)", [table]
                ).fetchone()
            out[table] = int(row[0]) if row else 0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=float, default=6.0)
    args = parser.parse_args()
    with scratch_database("gua_sizing") as url:
        upgrade(url)

        async def partitions() -> None:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await run_maintenance(conn, retention_days=35, ahead_days=3)

        asyncio.run(partitions())
        empty = sizes(url)
        pushed = asyncio.run(fill(url, args.hosts, args.gpus, args.hours))

        async def day_rollups() -> None:  # what the hourly maintenance does
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await refresh_day_rollups(conn)

        asyncio.run(day_rollups())
        grown = sizes(url)
        compact = sizes(url, full=True)
    measured = {t: grown[t] - empty[t] for t in grown}
    compacted = {t: compact[t] - empty[t] for t in compact}
    host_days = args.hosts * args.hours / 24
    print(
        f"{args.hosts} hosts x {args.gpus} GPUs, {args.hours:g} h at {TICK_SECONDS} s: "
        f"{pushed} observations"
    )
    print(f"{'table':<20} {'bytes':>12} {'MiB/host/day':>13} {'compact':>8}")
    for group, tables in (("raw", RAW), ("rollups", ROLLUPS)):
        total = packed = 0
        for table in tables:
            total += measured[table]
            packed += compacted[table]
            per = measured[table] / host_days / 2**20
            per_packed = compacted[table] / host_days / 2**20
            print(f"{table:<20} {measured[table]:>12,} {per:>13.2f} {per_packed:>8.2f}")
        mib, mib_packed = total / host_days / 2**20, packed / host_days / 2**20
        print(f"{'= ' + group:<20} {total:>12,} {mib:>13.2f} {mib_packed:>8.2f}")


if __name__ == "__main__":
    main()
