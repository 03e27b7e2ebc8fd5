"""The ingest write path alone: `store_batch` on one connection, no HTTP, no contention.

    .venv/bin/python bench/write_path.py [--hosts 300] [--rounds 20] [--batch 48] [--profile]
                                         [--jobs]

Creates a scratch database (dropped at the end), --hosts hosts, and pushes --rounds
in-order 8-GPU / 16-process snapshots per host (the payload of bench/ingest.py) through
`board.ingest.store.store_batch` in transactions of --batch observations, the way the
group-commit writer does. Prints, per observation: wall time, this process's CPU (the
board worker's share) and the PostgreSQL backend's CPU (from /proc), plus the cost of
validating the payload (`SnapshotIn.model_validate_json`) for comparison. --profile
prints the top of a cProfile of the Python side.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import scratch_database, server_version  # noqa: E402
from ingest import jobs_on_every_gpu_sql, snapshot  # noqa: E402

from board.app import tune_gc  # noqa: E402
from board.db.migrate import upgrade  # noqa: E402
from board.ingest.normalize import Observation  # noqa: E402
from board.ingest.schemas import SnapshotIn  # noqa: E402
from board.ingest.store import GpuInfo, GpuKey, store_batch  # noqa: E402
from board.jobs.batch import JobGpuCache  # noqa: E402
from board.observations.maintenance import run_maintenance  # noqa: E402


def backend_cpu(pid: int) -> float:
    """CPU seconds of one PostgreSQL backend (same machine only; ns resolution)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


async def setup(
    conn: psycopg.AsyncConnection[Any], hosts: int, fillfactor: int | None = None
) -> list[tuple[int, int]]:
    await run_maintenance(conn, retention_days=35, ahead_days=3)
    if fillfactor is not None:  # an experiment: the tables ingest updates in place
        for table in ("hosts", "gpu_hour_rollups", "user_hour_rollups", "host_hour_rollups"):
            await conn.execute(f"ALTER TABLE {table} SET (fillfactor = {int(fillfactor)})")
    cur = await conn.execute(
        "INSERT INTO workspaces (slug, name) VALUES ('bench', 'Bench') RETURNING id"
    )
    row = await cur.fetchone()
    assert row is not None
    workspace_id = int(row[0])
    cur = await conn.execute(
        """
        INSERT INTO hosts (workspace_id, public_id, display_name, agent_token_hash,
                           agent_token_prefix)
        SELECT %s, gen_random_uuid(), 'bench-' || i, decode(md5(i::text), 'hex'), 'gua_agent_x'
        FROM generate_series(1, %s) AS i
        RETURNING workspace_id, id
        """,
        [workspace_id, hosts],
    )
    return [(int(r[0]), int(r[1])) for r in await cur.fetchall()]


def bodies(hosts: list[tuple[int, int]], rounds: int, start: datetime) -> list[list[bytes]]:
    """Per round, one body per host; observedAt increases by 30 s a round."""
    out = []
    template = json.dumps(snapshot("bench-host"))
    for r in range(rounds):
        stamp = (start + timedelta(seconds=30 * r)).isoformat()
        body = template.replace("@OBSERVED_AT@", stamp).encode()
        out.append([body] * len(hosts))
    return out


async def run(args: argparse.Namespace, url: str) -> None:
    tune_gc()  # as a board worker does
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        hosts = await setup(conn, args.hosts, args.fillfactor)
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=30 * args.rounds + 60)
    per_round = bodies(hosts, args.rounds, start)

    sample = per_round[0][0]
    t0 = time.process_time()
    for _ in range(1000):
        SnapshotIn.model_validate_json(sample)
    validate_ms = time.process_time() - t0

    batches: list[list[Observation]] = []
    for round_bodies in per_round:
        obs = []
        for (ws, host), body in zip(hosts, round_bodies, strict=True):
            s = SnapshotIn.model_validate_json(body)
            obs.append(Observation(ws, host, s.observed_at(), datetime.now(UTC), s))
        batches.extend(obs[i : i + args.batch] for i in range(0, len(obs), args.batch))

    cache: dict[GpuKey, GpuInfo] = {}
    job_cache: JobGpuCache = {}  # kept between batches, as the writer does
    profile = cProfile.Profile() if args.profile else None
    async with await psycopg.AsyncConnection.connect(url) as conn:
        pid = conn.info.backend_pid
        # The first round creates the GPU rows and opens every host's series: not timed.
        warm = -(-len(hosts) // args.batch)
        for batch in batches[:warm]:
            await store_batch(conn, batch, cache, job_cache=job_cache)
        if args.jobs:  # the GPUs are known now: a running job on each (bench/ingest.py)
            await conn.execute(jobs_on_every_gpu_sql())
            await conn.commit()
        measured = batches[warm:]
        wall0, cpu0, pg0 = time.perf_counter(), time.process_time(), backend_cpu(pid)
        if profile is not None:
            profile.enable()
        for batch in measured:
            await store_batch(conn, batch, cache, job_cache=job_cache)
        if profile is not None:
            profile.disable()
        total = [time.perf_counter() - wall0, time.process_time() - cpu0, backend_cpu(pid) - pg0]
    n = sum(len(b) for b in measured)
    print(f"PostgreSQL {server_version(url)}, Python {sys.version.split()[0]}")
    print(f"{n} observations in {len(measured)} transactions of up to {args.batch}")
    print(f"validate (pydantic, one body): {validate_ms:.3f} ms/obs")
    print("ms per observation:")
    print(f"  wall                {total[0] * 1e3 / n:7.3f}")
    print(f"  Python CPU          {total[1] * 1e3 / n:7.3f}")
    print(f"  PostgreSQL backend  {total[2] * 1e3 / n:7.3f}")
    if args.stats:
        await print_table_stats(url)
    if profile is not None:
        stats = pstats.Stats(profile).sort_stats(args.sort)
        stats.print_stats(40)
        if args.callers:
            stats.print_callers(args.callers)


async def print_table_stats(url: str) -> None:
    """Row updates and how many were HOT (no index entries written), per table."""
    await asyncio.sleep(1.0)  # statistics reach the views after a short delay
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE n_tup_upd > 0 OR relname LIKE '%%rollups' ORDER BY relname"
        )
        print(f"{'table':<22} {'inserts':>9} {'updates':>9} {'HOT':>9}")
        for name, ins, upd, hot in await cur.fetchall():
            print(f"{name:<22} {ins:>9} {upd:>9} {hot:>9}")
        cur = await conn.execute(
            "SELECT relname, pg_relation_size(oid), pg_indexes_size(oid) FROM pg_class "
            "WHERE relname IN ('hosts', 'gpu_hour_rollups', 'user_hour_rollups', "
            "'host_hour_rollups') ORDER BY relname"
        )
        print(f"{'table':<22} {'heap KiB':>9} {'index KiB':>9}  (before any vacuum)")
        for name, heap, index in await cur.fetchall():
            print(f"{name:<22} {heap // 1024:>9} {index // 1024:>9}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=48)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--fillfactor", type=int, help="set this fillfactor on the updated tables first"
    )
    parser.add_argument("--stats", action="store_true", help="print per-table update counts")
    parser.add_argument(
        "--jobs", action="store_true", help="a running scheduler job on every GPU (after round 1)"
    )
    parser.add_argument("--sort", default="cumulative", help="cProfile order (--profile)")
    parser.add_argument("--callers", help="with --profile: who calls the functions matching this")
    args = parser.parse_args()
    with scratch_database("gua_bench_write") as url:
        upgrade(url)
        asyncio.run(run(args, url))


if __name__ == "__main__":
    main()
