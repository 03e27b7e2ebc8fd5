"""Reports benchmark: a synthetic fleet's hourly rollups, the report queries timed.

    .venv/bin/python bench/reports.py [--repeat 15] [--days 90] [--keep] [--hourly]
                                      [--served [--served-only] [--heavy-repeat 2]]

What it does:
1. creates a scratch database (gua_bench_reports_<hex>) on GUA_BOARD_DATABASE_URL's server,
   else on the local PostgreSQL, and migrates it;
2. creates one workspace with 125 hosts of 8 GPUs (1,000 GPUs) and COPYs --days days of
   hourly rollups straight into gpu_hour_rollups (one row per GPU and hour) and
   user_hour_rollups (20 Linux users; a GPU-hour is held by nobody, one user or two);
   the closed days' day rollups are computed as the maintenance schedule does; then
   VACUUM ANALYZE, as autovacuum would have done;
3. times, in process (usage: the service function, alone, then with the body made;
   utilization: its streamed body, made whole, none of it kept) and through the ASGI
   app (auth, routing, the body and all): usage groupBy=user over 30 and 90 days,
   utilization groupBy=gpu bucket=day over 90 days as JSON and as CSV; prints median
   and p95 over --repeat calls after one warm-up call; then the host page's history
   (24 hourly buckets per GPU of one host) as the page reads it (the report's JSON);
4. --served: the same fleet through a served board (`gua-board serve --workers 1` of
   this checkout, over HTTP): first byte, whole body, server CPU and the worker's peak
   RSS for the hourly per-GPU and per-host, the daily per-GPU and the usage reports over
   90 days, JSON and CSV (bench/reports_served.py; --served-only skips steps 3);
5. drops the scratch database (unless --keep).

To compare with another revision, copy bench/reports.py and bench/reports_served.py
into a worktree of it and run them there: they import and serve that worktree's board.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson
import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from board.app import create_app, tune_gc  # noqa: E402
from board.db.migrate import upgrade  # noqa: E402
from board.reportkit import params  # noqa: E402
from board.reports import service  # noqa: E402
from board.reports.utilization_stream import utilization_body  # noqa: E402
from board.rollups.daily import refresh_day_rollups  # noqa: E402
from board.settings import Settings  # noqa: E402

HOSTS = 125
GPUS_PER_HOST = 8
USERS = [f"user{i:02d}" for i in range(20)]
HOUR_US = 3_600_000_000


def server_url() -> str:
    configured = os.environ.get("GUA_BOARD_DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432"
    parts = urlsplit(configured.replace("postgresql+psycopg://", "postgresql://"))
    return urlunsplit(("postgresql", parts.netloc, "/postgres", parts.query, ""))


def with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))


GPU_COPY = (
    "COPY gpu_hour_rollups (workspace_id, gpu_id, hour_start, host_id, covered_us, active_us, "
    "idle_held_us, idle_us, util_pct_us, memory_used_mb_us, memory_total_mb_us, sample_count, "
    "energy_covered_us, active_energy_uws, idle_held_energy_uws, idle_energy_uws) FROM STDIN"
)
USER_COPY = (
    "COPY user_hour_rollups (workspace_id, gpu_id, linux_user, hour_start, host_id, held_us, "
    "active_us, idle_held_us, energy_held_us, active_energy_uws, idle_held_energy_uws) "
    "FROM STDIN"
)
# Watts by state: an H100 busy, held and idle, idle (energy in every hour, as agents
# that read the power send it).
WATTS = {"active": 300, "idle_held": 70, "idle": 50}


def fleet_lines(
    workspace_id: int,
    gpu_ids: list[tuple[int, int]],
    days: int,
    end: datetime,
    table: int,
    seed: int = 42,
    by_hour: bool = False,
) -> Iterator[str]:
    """COPY lines of one table (0: GPU-hours, 1: user-hours); same seed, same fleet
    (bench/scale.py loads a day at a time, each day with a seed of its own).

    `by_hour`: the same lines, an hour's at a time (all GPUs of an hour, then the next),
    laid on disk as ingest lays them (it writes an hour's rows during that hour); GPU by
    GPU, one hour's rows are spread over all the pages of the load, so reading an hour
    reads them all."""
    if by_hour:
        hours: dict[str, list[str]] = {}
        for line in fleet_lines(workspace_id, gpu_ids, days, end, table, seed):
            stamp = line.split("\t", 4)[2 if table == 0 else 3]
            hours.setdefault(stamp, []).append(line)
        for stamp in sorted(hours):
            yield from hours[stamp]
        return
    rng = random.Random(seed)
    start = end - timedelta(days=days)
    stamps = [(start + timedelta(hours=i)).isoformat() for i in range(days * 24)]
    for gpu_id, host_id in gpu_ids:
        owner = rng.choice(USERS)
        for stamp in stamps:
            held = rng.random() < 0.75
            active = rng.randrange(0, HOUR_US) if held else 0
            idle_held = HOUR_US - active if held else 0
            util = rng.randrange(0, 100)
            users = sorted({owner} if rng.random() < 0.9 else {owner, rng.choice(USERS)})
            if rng.random() < 0.002:
                owner = rng.choice(USERS)  # jobs change hands now and then
            idle = 0 if held else HOUR_US
            if table == 0:
                yield (
                    f"{workspace_id}\t{gpu_id}\t{stamp}\t{host_id}\t{HOUR_US}\t{active}\t"
                    f"{idle_held}\t{idle}\t{util * HOUR_US}\t"
                    f"{40000 * HOUR_US}\t{81559 * HOUR_US}\t120\t{HOUR_US}\t"
                    f"{WATTS['active'] * active}\t{WATTS['idle_held'] * idle_held}\t"
                    f"{WATTS['idle'] * idle}"
                )
            elif held:
                k = len(users)
                for user in users:
                    yield (
                        f"{workspace_id}\t{gpu_id}\t{user}\t{stamp}\t{host_id}\t"
                        f"{HOUR_US // k}\t{active // k}\t{idle_held // k}\t{HOUR_US // k}\t"
                        f"{WATTS['active'] * (active // k)}\t"
                        f"{WATTS['idle_held'] * (idle_held // k)}"
                    )


def copy_rows(conn: psycopg.Connection[Any], statement: str, lines: Iterator[str]) -> int:
    count = 0
    with conn.cursor() as cur, cur.copy(statement) as copy:
        chunk: list[str] = []
        for line in lines:
            chunk.append(line)
            if len(chunk) == 50_000:
                copy.write(("\n".join(chunk) + "\n").encode())
                count += len(chunk)
                chunk = []
        if chunk:
            copy.write(("\n".join(chunk) + "\n").encode())
            count += len(chunk)
    conn.commit()
    return count


def load_fleet(url: str, days: int, end: datetime) -> tuple[int, int, int]:
    """The workspace, hosts, GPUs and rollups; returns (workspace_id, gpu rows, user rows)."""
    with psycopg.connect(url) as conn:
        ws = conn.execute(
            "INSERT INTO workspaces (slug, name) VALUES ('bench', 'Bench') RETURNING id"
        ).fetchone()
        assert ws is not None
        workspace_id = int(ws[0])
        # Its slug's route (board.auth.routing), as creating it through the service would.
        conn.execute(
            "INSERT INTO routing_keys (kind, key, workspace_id) "
            "VALUES ('workspace_slug', 'bench'::bytea, %s)",
            [workspace_id],
        )
        gpu_ids: list[tuple[int, int]] = []
        for h in range(HOSTS):
            row = conn.execute(
                "INSERT INTO hosts (workspace_id, public_id, display_name, hostname, "
                "agent_token_hash, agent_token_prefix) VALUES (%s, %s, %s, %s, %s, %s) "
                "RETURNING id",
                [
                    workspace_id,
                    uuid.uuid4(),
                    f"node-{h:03d}",
                    f"node-{h:03d}",
                    secrets.token_bytes(32),
                    "gua_agent_x",
                ],
            ).fetchone()
            assert row is not None
            host_id = int(row[0])
            for i in range(GPUS_PER_HOST):
                g = conn.execute(
                    "INSERT INTO gpus (workspace_id, host_id, uuid, gpu_index, name, "
                    "memory_total_mb) VALUES (%s, %s, %s, %s, 'NVIDIA H100', 81559) RETURNING id",
                    [workspace_id, host_id, f"GPU-{h:03d}-{i}", i],
                ).fetchone()
                assert g is not None
                gpu_ids.append((int(g[0]), host_id))
        conn.commit()

        gpu_rows = copy_rows(conn, GPU_COPY, fleet_lines(workspace_id, gpu_ids, days, end, 0))
        user_rows = copy_rows(conn, USER_COPY, fleet_lines(workspace_id, gpu_ids, days, end, 1))
    # What the maintenance schedule does once an hour: the closed days' day rows.
    asyncio.run(_refresh(url))
    with psycopg.connect(url, autocommit=True) as conn:
        for table in (
            "gpu_hour_rollups",
            "user_hour_rollups",
            "gpu_day_rollups",
            "user_day_rollups",
            "user_day_totals",
        ):
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))
    return workspace_id, gpu_rows, user_rows


async def _refresh(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await refresh_day_rollups(conn)


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, float, Any]:
    result = await fn()  # warm-up: plans, caches
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = await fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return statistics.median(samples), p95, result


def row_count(body: bytes, fmt: str) -> int:
    if fmt == "csv":
        return body.count(b"\r\n") - 1
    return len(orjson.loads(body)["rows"])


async def measure(
    url: str, workspace_id: int, end: datetime, repeat: int, hourly: bool = False
) -> list[list[str]]:
    tune_gc()  # as `gua-board serve` does in each worker process
    day = end.date()
    windows = {
        7: params.parse_window((day - timedelta(days=7)).isoformat(), day.isoformat(), None),
        30: params.parse_window((day - timedelta(days=30)).isoformat(), day.isoformat(), None),
        90: params.parse_window((day - timedelta(days=90)).isoformat(), day.isoformat(), None),
    }
    # (name, query, days, the service call the route makes, the body it sends)
    cases: list[tuple[str, dict[str, str], int, Callable[[Any], Any], Callable[[Any], bytes]]]
    cases = [
        (
            f"usage groupBy=user, {span} days",
            {"groupBy": "user"},
            span,
            lambda c, span=span: service.usage_report(c, workspace_id, windows[span], ("user",)),
            lambda report: report.to_json(),
        )
        for span in (30, 90)
    ]
    for fmt in ("json", "csv"):
        cases.append(
            (
                f"utilization groupBy=gpu bucket=day, 90 days, {fmt}",
                {"groupBy": "gpu", "bucket": "day", "format": fmt},
                90,
                lambda c, fmt=fmt: utilization_body(
                    c, workspace_id, windows[90], "gpu", "day", fmt
                ),
                lambda body: body,
            )
        )
    # Hourly buckets (--hourly): per host over 90 days (270,000 rows summed from 2.16 M
    # hour rows), per GPU over 7 days (168,000 rows).
    for group, span in (("host", 90), ("gpu", 7)) if hourly else ():
        cases.append(
            (
                f"utilization groupBy={group} bucket=hour, {span} days, json",
                {"groupBy": group, "bucket": "hour"},
                span,
                lambda c, group=group, span=span: utilization_body(
                    c, workspace_id, windows[span], group, "hour", "json"
                ),
                lambda body: body,
            )
        )
    table: list[list[str]] = []
    async with await psycopg.AsyncConnection.connect(url) as conn:
        for name, query, _, call, body in cases:

            async def run(call: Any = call) -> Any:
                report = await call(conn)
                await conn.commit()
                return report

            median, p95, report = await timed(run, repeat)

            async def run_body(call: Any = call, body: Any = body) -> bytes:
                report = await call(conn)
                await conn.commit()
                return bytes(body(report))

            bmedian, bp95, sent = await timed(run_body, repeat)
            table.append(
                [
                    name,
                    f"{row_count(sent, query.get('format', 'json')):,}",
                    f"{median:.0f}",
                    f"{p95:.0f}",
                    f"{bmedian:.0f}",
                    f"{bp95:.0f}",
                ]
            )

    # Through the ASGI app: auth, the route, the body.
    app = create_app(Settings(database_url=url), run_maintenance=False)
    async with app.router.lifespan_context(app):
        headers = {"Authorization": f"Bearer {await member_token(app)}"}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for row, (name, query, span, _, _) in zip(table, cases, strict=True):
                kind = "usage" if name.startswith("usage") else "utilization"
                q = {
                    "from": (day - timedelta(days=span)).isoformat(),
                    "to": day.isoformat(),
                    **query,
                }

                async def get(kind: str = kind, q: dict[str, str] = q) -> int:
                    r = await client.get(
                        f"/api/v1/workspaces/bench/reports/{kind}", params=q, headers=headers
                    )
                    assert r.status_code == 200, r.text
                    return len(r.content)

                median, p95, size = await timed(get, repeat)
                row += [f"{median:.0f}", f"{p95:.0f}", f"{size / 1024:.0f} KiB"]
    return table


async def member_token(app: Any) -> str:
    """A new finance member of the bench workspace; its API token."""
    from board.workspaces import service as workspaces

    async with app.state.runtime.sessions() as session:
        ws = await workspaces.get_workspace(session, "bench")
        member = await workspaces.add_member(
            session, ws, f"finance-{secrets.token_hex(3)}@bench.example", "finance", None
        )
        await session.commit()
    return str(member.api_token)


async def new_member_token(url: str) -> str:
    app = create_app(Settings(database_url=url), run_maintenance=False)
    async with app.router.lifespan_context(app):
        return await member_token(app)


async def measure_host_page(
    url: str, workspace_id: int, end: datetime, repeat: int
) -> list[list[str]]:
    """The host page's history: 24 hourly buckets per GPU, of one host or (as the page
    once read it, then filtered) of the whole fleet; the report's body, parsed."""
    window = params.parse_window((end - timedelta(hours=24)).isoformat(), end.isoformat(), None)
    table = []
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT min(id) FROM hosts WHERE workspace_id = %s", [workspace_id]
        )
        host = await cur.fetchone()
        assert host is not None
        for name, host_id in (("one host", host[0]), ("whole fleet", None)):

            async def run(host_id: int | None = host_id) -> Any:
                # As the page reads it: the report's JSON body, parsed.
                body = await utilization_body(
                    conn, workspace_id, window, "gpu", "hour", "json", host_id
                )
                await conn.commit()
                return orjson.loads(body)["rows"]

            median, p95, rows = await timed(run, repeat)
            table.append([name, f"{len(rows):,}", f"{median:.0f}", f"{p95:.0f}"])
    return table


def kept_fleet(url: str) -> tuple[int, datetime]:
    """The workspace id and the end of the loaded days of a kept database."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT w.id, max(d.day_start) + interval '1 day' FROM workspaces w "
            "JOIN gpu_day_rollups d ON d.workspace_id = w.id WHERE w.slug = 'bench' "
            "GROUP BY w.id"
        ).fetchone()
    if row is None:
        raise SystemExit("no benchmark fleet in that database")
    return int(row[0]), row[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument(
        "--hourly", action="store_true", help="also time hourly utilization reports (slow)"
    )
    parser.add_argument(
        "--database", help="time against a database kept by an earlier --keep run (no load)"
    )
    parser.add_argument(
        "--served", action="store_true", help="also time the reports through a served board"
    )
    parser.add_argument("--served-only", action="store_true", help="--served, nothing else")
    parser.add_argument(
        "--load-only", action="store_true", help="load the fleet (with --keep), time nothing"
    )
    parser.add_argument(
        "--cases", help="served cases whose name contains one of these (comma-separated)"
    )
    parser.add_argument(
        "--heavy-repeat", type=int, default=2, help="served runs of the 2 M-row reports (2)"
    )
    args = parser.parse_args()
    args.served = args.served or args.served_only

    admin = server_url()
    name = args.database or f"gua_bench_reports_{secrets.token_hex(4)}"
    url = with_db(admin, name)
    if args.database:
        args.keep = True
    else:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        upgrade(url)
        if args.database:
            workspace_id, end = kept_fleet(url)
        else:
            end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
            t0 = time.perf_counter()
            workspace_id, gpu_rows, user_rows = load_fleet(url, args.days, end)
            print(
                f"loaded {HOSTS} hosts, {HOSTS * GPUS_PER_HOST} GPUs, {args.days} days: "
                f"{gpu_rows:,} GPU-hour rows, {user_rows:,} user-hour rows "
                f"in {time.perf_counter() - t0:.0f} s"
            )
        if args.load_only:
            return 0
        if args.served:
            from reports_served import SERVED_HEADER, measure_served

            token = asyncio.run(new_member_token(url))
            only = args.cases.split(",") if args.cases else None
            served = measure_served(url, token, end.date(), args.repeat, args.heavy_repeat, only)
            print("| " + " | ".join(SERVED_HEADER) + " |")
            print("|" + " --- |" * len(SERVED_HEADER))
            for row in served:
                print("| " + " | ".join(row) + " |")
            print()
        if args.served_only:
            return 0
        table = asyncio.run(measure(url, workspace_id, end, args.repeat, args.hourly))
        header = [
            "report",
            "rows",
            "service p50 ms",
            "service p95 ms",
            "+body p50 ms",
            "+body p95 ms",
            "ASGI p50 ms",
            "ASGI p95 ms",
            "body",
        ]
        print("| " + " | ".join(header) + " |")
        print("|" + " --- |" * len(header))
        for row in table:
            print("| " + " | ".join(row) + " |")
        print()
        print("| host page history, 24 h hourly per GPU | rows | service p50 ms | service p95 ms |")
        print("| --- | --- | --- | --- |")
        for row in asyncio.run(measure_host_page(url, workspace_id, end, args.repeat)):
            print("| " + " | ".join(row) + " |")
    finally:
        if args.keep:
            print(f"kept database {name}")
        else:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
