"""Jobs report benchmark: 2,000 GPUs, 30 days of Slurm jobs (~50,000), the report timed.

    .venv/bin/python bench/jobs_report.py [--repeat 7] [--days 30] [--keep] [--hours-only]

What it does:
1. creates a scratch database (gua_bench_jobs_<hex>) on GUA_BOARD_DATABASE_URL's server,
   else on the local PostgreSQL, and migrates it;
2. creates one workspace with 250 hosts of 8 GPUs (2,000 GPUs) and, on each pair of GPUs,
   jobs of 2 GPUs back to back (4 to 25 hours each, 200 Linux users, 40 accounts mapped to
   10 teams, 3 partitions) through --days days, the last ones still running; then the
   figure rows crediting writes for them (one per job, GPU and UTC hour, a part hour at
   each end, split active / idle-held / foreign / unused); their insert marks their days
   dirty (the trigger on job_hour_figures), and the maintenance schedule's refresh
   (board.jobs.days.refresh_job_days, run until nothing is left) builds the day rows of
   the closed days; then VACUUM ANALYZE;
3. times the report as the route builds it (board.jobs.report.jobs_report, then its JSON)
   for the last 30 days, groupBy job, user, account, partition and day: median and p95 of
   --repeat calls after one warm-up call, printed beside the goal (p50 < 1 s); with
   --hours-only, every figure read from the hour rows (as before the day rows).
4. drops the scratch database (unless --keep).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import scratch_database  # noqa: E402
from board.db.migrate import upgrade  # noqa: E402
from board.jobs.days import refresh_job_days  # noqa: E402
from board.jobs.report import jobs_report, parse_query  # noqa: E402
from board.reportkit import params  # noqa: E402

HOSTS = 250
GPUS_PER_HOST = 8
USERS = 200
ACCOUNTS = 40
TEAMS = 10
PARTITIONS = ("gpu", "big", "debug")
GOAL_S = 1.0

_FIGURES = """
    INSERT INTO job_hour_figures (workspace_id, job_id, gpu_id, hour_start, host_id,
        covered_us, active_us, idle_held_us, foreign_us, unused_us, util_pct_us,
        max_memory_used_mb)
    SELECT jg.workspace_id, jg.job_id, g.id, h, jg.host_id, c, a, i, f, c - a - i - f,
           a * (40 + jg.job_id %% 60), 1000 + (jg.job_id * 7919 + g.id) %% 80000
    FROM job_gpus jg
    JOIN gpus g ON g.workspace_id = jg.workspace_id AND g.host_id = jg.host_id
               AND g.gpu_index = jg.device
    CROSS JOIN LATERAL generate_series(
        date_trunc('hour', lower(jg.during)),
        least(coalesce(upper(jg.during), %(end)s), %(end)s) - interval '1 microsecond',
        interval '1 hour') AS h
    CROSS JOIN LATERAL (SELECT (extract(epoch FROM
        least(h + interval '1 hour', coalesce(upper(jg.during), %(end)s), %(end)s)
        - greatest(h, lower(jg.during))) * 1000000)::bigint AS c) AS covered
    CROSS JOIN LATERAL (SELECT c * (jg.job_id %% 10) / 10 AS a,
                               c * (jg.job_id / 10 %% 3) / 10 AS i,
                               c * (jg.job_id / 30 %% 2) / 20 AS f) AS parts
    WHERE jg.workspace_id = %(ws)s
"""


def load(url: str, days: int, end: datetime) -> tuple[int, int, int]:
    """The workspace, hosts, GPUs, jobs and their figures: (workspace, jobs, figure rows)."""
    with psycopg.connect(url) as conn:
        ws_row = conn.execute(
            "INSERT INTO workspaces (slug, name) VALUES ('bench', 'Bench') RETURNING id"
        ).fetchone()
        assert ws_row is not None
        ws = int(ws_row[0])
        # Its slug's route (board.auth.routing), as creating it through the service would.
        conn.execute(
            "INSERT INTO routing_keys (kind, key, workspace_id) "
            "VALUES ('workspace_slug', 'bench'::bytea, %s)",
            [ws],
        )
        host_ids = []
        for h in range(HOSTS):
            row = conn.execute(
                "INSERT INTO hosts (workspace_id, public_id, display_name, hostname, "
                "agent_token_hash, agent_token_prefix) VALUES (%s, %s, %s, %s, %s, %s) "
                "RETURNING id",
                [
                    ws,
                    uuid.uuid4(),
                    f"node-{h:03d}",
                    f"node-{h:03d}",
                    secrets.token_bytes(32),
                    "gua_agent_x",
                ],
            ).fetchone()
            assert row is not None
            host_ids.append(int(row[0]))
            conn.execute(
                "INSERT INTO gpus (workspace_id, host_id, uuid, gpu_index, name, memory_total_mb) "
                "SELECT %s, %s, 'GPU-' || %s || '-' || i, i, 'NVIDIA H100', 81559 "
                "FROM generate_series(0, %s) AS i",
                [ws, row[0], h, GPUS_PER_HOST - 1],
            )
        job_id, figures = add_jobs(conn, ws, host_ids, end - timedelta(days=days), end)
        conn.commit()
    asyncio.run(refresh_days(url))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return ws, job_id, figures


def add_jobs(
    conn: psycopg.Connection[Any], ws: int, host_ids: list[int], start: datetime, end: datetime
) -> tuple[int, int]:
    """The accounts and their teams, jobs on every pair of each host's GPUs from `start`
    to `end` and their figure rows, uncommitted (bench/scale.py adds them to its fleet):
    (jobs, figure rows). The hosts' GPUs are numbered 0..7."""
    rng = random.Random(29)
    for a in range(ACCOUNTS):
        conn.execute(
            "INSERT INTO account_teams (workspace_id, account, team) VALUES (%s, %s, %s)",
            [ws, f"acct-{a:02d}", f"team-{a % TEAMS}"],
        )
    job_id = 0
    with conn.cursor().copy(
        "COPY scheduler_jobs (workspace_id, id, public_id, cluster, raw_job_id, job_id, "
        "linux_user, account, partition, name, state, started_at, ended_at) FROM STDIN"
    ) as jobs_copy:
        allocations = []
        for host in host_ids:
            for pair in range(GPUS_PER_HOST // 2):
                at = start - timedelta(minutes=rng.randrange(0, 20 * 60))
                while at < end:
                    length = timedelta(minutes=rng.randrange(4 * 60, 25 * 60))
                    ended = at + length if at + length <= end else None
                    job_id += 1
                    user = rng.randrange(USERS)
                    jobs_copy.write_row(
                        (
                            ws,
                            job_id,
                            uuid.uuid4(),
                            "hpc",
                            str(job_id),
                            str(job_id),
                            f"user{user:03d}",
                            f"acct-{user % ACCOUNTS:02d}",
                            PARTITIONS[job_id % 3],
                            f"train-{job_id}",
                            "COMPLETED" if ended else "RUNNING",
                            at,
                            ended,
                        )
                    )
                    allocations.append((job_id, host, pair, at, ended, f"user{user:03d}"))
                    at += length + timedelta(minutes=rng.randrange(0, 30))
    with conn.cursor().copy(
        "COPY job_gpus (workspace_id, job_id, host_id, device, during, linux_user) FROM STDIN"
    ) as gpus_copy:
        for job, host, pair, at, ended, user_name in allocations:
            upper = ended.isoformat() if ended else ""
            for device in (2 * pair, 2 * pair + 1):
                row = (ws, job, host, device, f"[{at.isoformat()},{upper})", user_name)
                gpus_copy.write_row(row)
    figures = conn.execute(_FIGURES, {"ws": ws, "end": end}).rowcount
    return job_id, figures


async def refresh_days(url: str) -> None:
    """The day rows of the closed days, as the maintenance schedule builds them."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while await refresh_job_days(conn):
            pass


async def time_report(
    url: str, ws: int, window: params.Window, group: str, repeat: int, day_rows: bool
) -> list[float]:
    query = parse_query(window, group, None, None, None)
    took = []
    async with await psycopg.AsyncConnection.connect(url) as conn:
        for i in range(repeat + 1):
            t0 = time.perf_counter()
            report = await jobs_report(conn, ws, query, day_rows=day_rows)
            report.to_json()
            await conn.rollback()
            if i:
                took.append(time.perf_counter() - t0)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--hours-only", action="store_true", help="read no day rows")
    args = parser.parse_args()
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    with scratch_database("gua_bench_jobs") as url:
        upgrade(url)
        t0 = time.perf_counter()
        ws, jobs, figures = load(url, args.days, end)
        with psycopg.connect(url) as conn:
            day_row = conn.execute("SELECT count(*) FROM job_day_figures").fetchone()
        print(
            f"loaded {HOSTS * GPUS_PER_HOST} GPUs, {jobs} jobs, {figures} figure rows, "
            f"{day_row[0] if day_row else 0} day rows in {time.perf_counter() - t0:.0f} s"
        )
        window = params.parse_window((end - timedelta(days=30)).isoformat(), end.isoformat(), "UTC")
        source = "hour rows only" if args.hours_only else "day rows for closed days"
        print(
            f"jobs report, last 30 days, {source}, {args.repeat} calls (goal: p50 < {GOAL_S:.1f} s)"
        )
        for group in ("job", "user", "account", "partition", "day"):
            took = asyncio.run(
                time_report(url, ws, window, group, args.repeat, not args.hours_only)
            )
            p50 = statistics.median(took)
            p95 = sorted(took)[max(0, round(0.95 * len(took)) - 1)]
            verdict = "ok" if p50 < GOAL_S else "SLOWER than the goal"
            print(f"  groupBy={group:<9} p50 {p50:6.3f} s  p95 {p95:6.3f} s  {verdict}")
        if args.keep:
            print(f"kept: {url}")
            input("press Enter to drop it")


if __name__ == "__main__":
    main()
