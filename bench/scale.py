"""A 2,000-GPU lab over 13 months: 250 hosts x 8 GPUs, 400 days of history, the reports,
pages and storage checked against their goals.

    nice -n 19 .venv/bin/python bench/scale.py [--quick] [--repeat 7] [--keep]
    nice -n 19 .venv/bin/python bench/scale.py --on /tmp/gua_bench_scale_XXXX.json

What it does:
1. a scratch database (bench/_common.py), migrated, with the raw partitions and a
   workspace with a password admin (bench/fleet.py's `prepare`);
2. the board in process (the ASGI app, no maintenance schedule): --hosts hosts enrolled
   through the API, each pushing two observations now (bench/fleet.py's snapshots), so
   the fleet page has a live fleet and `gpus` has their GPUs;
3. 400 days of hour rollups of those GPUs up to the current hour, COPYed a UTC day at a
   time (bench/reports.py's generator: 20 Linux users, energy in every hour, a day's
   seed its own), an hour's rows together as ingest lays them on disk (it writes each
   hour's rows during that hour), into gpu_hour_rollups and user_hour_rollups: their
   triggers keep the host hours and mark the days dirty, as for ingest's writes. The
   board keeps hours for 400 days (min_retention_days, board/rollups/retention.py), so
   all of them stay.
   Then the day rows of the closed days, by the maintenance schedule's own refresh
   (board.rollups.daily.refresh_day_rollups); the users in 5 teams, EUR and prices, the
   workspace in Europe/Berlin (bench/money.py's `add_money`); Slurm jobs on every pair
   of GPUs through the 400 days with their figure rows and day rows
   (bench/jobs_report.py's `add_jobs`, board.jobs.days.refresh_job_days); a monthly
   budget per team through the API; VACUUM ANALYZE, as autovacuum would;
4. each figure through the app, as a browser or a script asks for it (auth, the route,
   its report connection, the whole body, gzip-compressed as browsers and HTTP
   libraries ask for it; the sizes printed are compressed): p50 of --repeat calls
   after one warm-up, printed beside its goal; the FOCUS export's first body byte and
   the growth of this process's peak RSS (VmHWM, reset before each call); the rollup
   and figure tables' pg_total_relation_size per GPU-day;
5. exits 1 when a goal is missed; drops the database (unless --keep).

--quick: 25 hosts (200 GPUs), the same 400 days, for a CI-sized run.
--keep: the database stays, and a file beside it in the temporary directory names it
   and holds the hosts' agent tokens; --on FILE measures that database again (step 4
   only, after each host pushed a new observation, so the fleet is live again), e.g.
   with the code before a change and after it, alternately. Drop it with --drop FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench._common import (  # noqa: E402
    enroll_in_process,
    scratch_database,
    server_url,
    with_database,
)
from bench.fleet import prepare, push_now, sign_in  # noqa: E402
from bench.jobs_report import add_jobs, refresh_days  # noqa: E402
from bench.money import TEAMS, ZONE, add_money  # noqa: E402
from bench.reports import GPU_COPY, USER_COPY, copy_rows, fleet_lines  # noqa: E402
from bench.reports_served import _reset_peak, _status_kb  # noqa: E402
from board.app import create_app, tune_gc  # noqa: E402
from board.db.migrate import upgrade  # noqa: E402
from board.rollups.daily import refresh_day_rollups  # noqa: E402
from board.settings import Settings  # noqa: E402

DAYS = 400
GPUS_PER_HOST = 8
ROLLUP_TABLES = (
    "gpu_hour_rollups",
    "host_hour_rollups",
    "user_hour_rollups",
    "gpu_day_rollups",
    "user_day_rollups",
    "gpu_day_totals",
    "user_day_totals",
    "rollup_dirty_days",
    "rollup_day_versions",
    "job_hour_figures",
    "job_day_figures",
    "outside_job_hours",
    "reservation_hour_figures",
    "report_bodies",
)
GOAL_BYTES_PER_GPU_DAY = 1024


@dataclass
class Check:
    name: str
    figure: str
    goal: str
    met: bool
    note: str = ""


def load_history(
    url: str, workspace_id: int, gpus: list[tuple[int, int]], end: datetime
) -> str | None:
    """400 days of hour rows up to `end`, a UTC day per COPY (and commit) as ingest
    commits a push at a time; then the closed days' day rows, as maintenance makes them."""
    t0 = time.perf_counter()
    with psycopg.connect(url) as conn:
        for n in range(DAYS):
            day_end = end - timedelta(days=DAYS - 1 - n)
            for table, statement in enumerate((GPU_COPY, USER_COPY)):
                lines = fleet_lines(workspace_id, gpus, 1, day_end, table, seed=n, by_hour=True)
                copy_rows(conn, statement, lines)
            if n % 50 == 49:
                took = time.perf_counter() - t0
                print(f"  {n + 1} days of hours in {took:.0f} s", file=sys.stderr, flush=True)

    with psycopg.connect(url, autocommit=True) as conn:
        # What autovacuum's analyze would have done by then: the refresh's plans need
        # the hour tables' statistics (without them it scanned every hour per week).
        conn.execute("ANALYZE gpu_hour_rollups, user_hour_rollups, host_hour_rollups")

    async def refresh() -> int:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            return await refresh_day_rollups(conn)

    t1 = time.perf_counter()
    try:
        refreshed = asyncio.run(refresh())
    except psycopg.errors.NumericValueOutOfRange as exc:
        # What the maintenance schedule meets too: it logs, retries next run, and the
        # days stay dirty (every report reads their hours). Measured as it is.
        print(f"  day rows: the refresh failed: {exc}", file=sys.stderr, flush=True)
        return str(exc)
    print(
        f"  hours: {t1 - t0:.0f} s ({(t1 - t0) / DAYS:.2f} s per day); day rows of "
        f"{refreshed} closed days: {time.perf_counter() - t1:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return None


async def enroll_and_push(app: Any, admin_token: str, hosts: int) -> list[str]:
    auth = {"Authorization": f"Bearer {admin_token}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        tokens = await enroll_in_process(client, "bench", auth, hosts)
        for _ in range(2):  # two ticks: every GPU has a state and an interval
            await push_now(client, tokens, range(hosts))
            await asyncio.sleep(1.0)
    return tokens


async def add_budgets(app: Any, admin_token: str, first: date) -> None:
    auth = {"Authorization": f"Bearer {admin_token}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for n, team in enumerate(TEAMS):
            body = {"period": "month", "gpuHours": 20_000 + 1_000 * n, "from": first.isoformat()}
            r = await client.put(
                f"/api/v1/workspaces/bench/budgets/{team}", json=body, headers=auth
            )
            assert r.status_code == 200, r.text


@dataclass
class Built:
    workspace_id: int
    gpus: int
    end: datetime  # of the hour rows
    refresh_error: str | None  # why the day rows' refresh failed
    agent_tokens: list[str]


def build(url: str, hosts: int) -> Built:
    """The whole fleet and its history."""
    admin_token = asyncio.run(prepare(url))
    settings = Settings(database_url=url, data_dir=Path(tempfile.mkdtemp(prefix="gua-scale-")))

    async def live() -> list[str]:
        app = create_app(settings, run_maintenance=False)
        async with app.router.lifespan_context(app):
            return await enroll_and_push(app, admin_token, hosts)

    tokens = asyncio.run(live())
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT id FROM workspaces WHERE slug = 'bench'").fetchone()
        assert row is not None
        ws = int(row[0])
        gpus = [
            (int(g), int(h))
            for g, h in conn.execute(
                "SELECT id, host_id FROM gpus WHERE workspace_id = %s ORDER BY host_id, gpu_index",
                [ws],
            ).fetchall()
        ]
    assert len(gpus) == hosts * GPUS_PER_HOST, len(gpus)
    refresh_error = load_history(url, ws, gpus, end)
    start = end - timedelta(days=DAYS)
    add_money(url, ws, start.date(), end.date())
    t0 = time.perf_counter()
    host_ids = sorted({h for _, h in gpus})
    with psycopg.connect(url) as conn:
        jobs, figures = add_jobs(conn, ws, host_ids, start, end)
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE scheduler_jobs, job_gpus, job_hour_figures")  # as autovacuum
    asyncio.run(refresh_days(url))
    print(
        f"  {jobs:,} jobs, {figures:,} job figure rows and their day rows: "
        f"{time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
        flush=True,
    )

    async def budgets() -> None:
        app = create_app(settings, run_maintenance=False)
        async with app.router.lifespan_context(app):
            local_today = datetime.now(UTC).date()
            await add_budgets(app, admin_token, local_today.replace(day=1) - timedelta(days=400))

    asyncio.run(budgets())
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return Built(ws, len(gpus), end, refresh_error, tokens)


@dataclass
class Answer:
    status: int
    first_byte_ms: float
    total_ms: float
    size: int


async def asgi_get(app: Any, path: str, query: dict[str, str], headers: dict[str, str]) -> Answer:
    """One GET straight into the app, timing its first body byte (httpx's ASGI transport
    gathers the whole body first) and the last; the body is counted, not kept."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": urlencode(query).encode(),
        "headers": [(b"host", b"bench")]
        + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "server": ("bench", 80),
        "client": ("127.0.0.1", 50000),
    }
    done = asyncio.Event()
    answer = Answer(0, 0.0, 0.0, 0)
    asked = False
    t0 = time.perf_counter()

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
        elif message["type"] == "http.response.body":
            body = message.get("body", b"")
            if body and not answer.first_byte_ms:
                answer.first_byte_ms = (time.perf_counter() - t0) * 1000
            answer.size += len(body)
            if not message.get("more_body", False):
                answer.total_ms = (time.perf_counter() - t0) * 1000
                done.set()

    await app(scope, receive, send)
    done.set()
    return answer


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


async def measure(
    url: str, workspace_id: int, gpus: int, end: datetime, repeat: int, push: list[str]
) -> list[Check]:
    """`push`: agent tokens of hosts that push a new observation first (a kept fleet,
    live again)."""
    tune_gc()  # as `gua-board serve` does in each worker process
    settings = Settings(database_url=url, data_dir=Path(tempfile.mkdtemp(prefix="gua-scale-")))
    app = create_app(settings, run_maintenance=False)
    checks: list[Check] = [storage(url, gpus)]
    today = end.astimezone(_zone()).date()
    month = (today.replace(day=1) - timedelta(days=1)).replace(day=1)  # last whole month
    next_month = (month + timedelta(days=32)).replace(day=1)
    year_start = (month - timedelta(days=335)).replace(day=1)  # 12 whole months
    async with app.router.lifespan_context(app):
        from bench.reports import member_token

        if push:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as agent:
                for _ in range(2):
                    await push_now(agent, push, range(len(push)))
                    await asyncio.sleep(1.0)
        # Compressed answers, as browsers and HTTP libraries (httpx, requests) ask.
        gzip = {"Accept-Encoding": "gzip"}
        api = {"Authorization": f"Bearer {await member_token(app)}", **gzip}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as browser:
            await sign_in(browser)
            cookie = "; ".join(f"{k}={v}" for k, v in browser.cookies.items())
        page = {"Cookie": cookie, **gzip}

        async def timed(path: str, query: dict[str, str], headers: dict[str, str]) -> list[Answer]:
            answers = []
            for _ in range(repeat + 1):  # the first is the warm-up
                a = await asgi_get(app, path, query, headers)
                assert a.status == 200, (path, query, a.status)
                answers.append(a)
            return answers

        def check(name: str, answers: list[Answer], goal_ms: float, what: str = "p50") -> None:
            took = p50([a.total_ms for a in answers[1:]])
            print(f"  {name}: {took:,.0f} ms", file=sys.stderr, flush=True)
            checks.append(
                Check(
                    name,
                    f"{what} {took:,.0f} ms (warm-up {answers[0].total_ms:,.0f} ms, "
                    f"{answers[-1].size / 1024:,.0f} KiB)",
                    f"< {goal_ms:,.0f} ms",
                    took < goal_ms,
                )
            )

        base = "/api/v1/workspaces/bench/reports"
        zone = {"tz": ZONE}
        month_q = {"from": month.isoformat(), "to": next_month.isoformat(), **zone}
        check(
            f"usage, {month:%Y-%m} by user",
            await timed(f"{base}/usage", {**month_q, "groupBy": "user"}, api),
            200,
        )
        year_q = {"from": year_start.isoformat(), "to": next_month.isoformat(), **zone}
        check(
            f"usage, {year_start:%Y-%m}..{month:%Y-%m} by team and month",
            await timed(f"{base}/usage", {**year_q, "groupBy": "team,month"}, api),
            1000,
        )
        util_q = {
            "from": (today - timedelta(days=90)).isoformat(),
            "to": today.isoformat(),
            "groupBy": "gpu",
            "bucket": "day",
            **zone,
        }
        check(
            "utilization, 90 days daily per GPU",
            await timed(f"{base}/utilization", util_q, api),
            500,
        )
        checks.append(await focus(app, api, month_q, repeat))
        check(
            f"budgets report, {month:%Y-%m}",
            await timed(f"{base}/budgets", {"period": f"{month:%Y-%m}"}, api),
            1000,
        )
        check(f"jobs report, {month:%Y-%m} by job", await timed(f"{base}/jobs", month_q, api), 1000)
        check("usage page (default: 7 days by user)", await timed("/w/bench/usage", {}, page), 300)
        through = (next_month - timedelta(days=1)).isoformat()
        check(
            f"usage page, {month:%Y-%m} by user",
            await timed("/w/bench/usage", {"from": month.isoformat(), "through": through}, page),
            300,
        )
        check(f"fleet page, {gpus:,} GPUs", await timed("/w/bench/", {}, page), 300)
    return checks


async def focus(app: Any, api: dict[str, str], month_q: dict[str, str], repeat: int) -> Check:
    """The FOCUS export of a month: first byte p50 (goal < 1 s) and this process's peak
    RSS growth over the call (kernel VmHWM, reset before each call)."""
    first, totals, growth = [], [], []
    size = 0
    for n in range(repeat + 1):
        _reset_peak_self()
        before = _status_kb_self("VmRSS")
        a = await asgi_get(app, "/api/v1/workspaces/bench/reports/focus", month_q, api)
        assert a.status == 200, a.status
        if n:
            first.append(a.first_byte_ms)
            totals.append(a.total_ms)
            growth.append((_status_kb_self("VmHWM") - before) / 1024)
        size = a.size
    took = p50(first)
    return Check(
        "FOCUS export, a month",
        f"first byte p50 {took:,.0f} ms (whole body {p50(totals):,.0f} ms, "
        f"{size / 2**20:,.1f} MiB); peak RSS growth max {max(growth):,.0f} MiB",
        "first byte < 1,000 ms; RSS bounded",
        took < 1000,
    )


def _reset_peak_self() -> None:
    import os

    _reset_peak(os.getpid())


def _status_kb_self(field: str) -> int:
    import os

    return _status_kb(os.getpid(), field)


def storage(url: str, gpus: int) -> Check:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT t, coalesce(pg_total_relation_size(to_regclass(t)), 0) "
            "FROM unnest(%s::text[]) AS t",
            [list(ROLLUP_TABLES)],
        ).fetchall()
        sizes = {str(t): int(size) for t, size in rows}
    gpu_days = gpus * DAYS
    print("| table | on disk | bytes per GPU-day |")
    print("| --- | --- | --- |")
    for table, size in sorted(sizes.items(), key=lambda kv: -kv[1]):
        if size:
            print(f"| {table} | {size / 2**20:,.0f} MiB | {size / gpu_days:,.0f} |")
    print()
    total = sum(sizes.values())
    per = total / gpu_days
    return Check(
        f"rollups on disk, {gpus:,} GPUs x {DAYS} days",
        f"{per:,.0f} B per GPU-day ({total / 2**30:,.2f} GiB)",
        f"<= {GOAL_BYTES_PER_GPU_DAY:,} B per GPU-day",
        per <= GOAL_BYTES_PER_GPU_DAY,
    )


def _zone() -> Any:
    from zoneinfo import ZoneInfo

    return ZoneInfo(ZONE)


def keep_database() -> str:
    """A new database that stays after this process (scratch_database drops its own)."""
    admin = server_url()
    name = f"gua_bench_scale_{secrets.token_hex(4)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(admin, name)


def drop_kept(kept: Path) -> None:
    url = json.loads(kept.read_text())["url"]
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
    kept.unlink()


def dirty_before(url: str, end: datetime) -> Check:
    """A kept database's day rows: none of the closed days may be dirty."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM rollup_dirty_days WHERE day_start < %s",
            [end.replace(hour=0)],
        ).fetchone()
    dirty = int(row[0]) if row else 0
    return Check(
        "day rows of the closed days (maintenance refresh)",
        f"{dirty} closed days dirty" if dirty else "made",
        "made",
        not dirty,
    )


def report(checks: list[Check]) -> int:
    print("| check | measured | goal | met |")
    print("| --- | --- | --- | --- |")
    for c in checks:
        print(f"| {c.name} | {c.figure} | {c.goal} | {'yes' if c.met else '**no**'} |")
    return 0 if all(c.met for c in checks) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="25 hosts (200 GPUs), 400 days")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the database (see --on)")
    parser.add_argument("--on", type=Path, help="measure the database --keep kept again")
    parser.add_argument("--drop", type=Path, help="drop the database --keep kept")
    args = parser.parse_args()
    if args.drop:
        drop_kept(args.drop)
        return 0
    if args.on:
        kept = json.loads(args.on.read_text())
        end = datetime.fromisoformat(kept["end"])
        checks = [
            dirty_before(kept["url"], end),
            *asyncio.run(
                measure(
                    kept["url"],
                    kept["workspace_id"],
                    kept["gpus"],
                    end,
                    args.repeat,
                    kept["tokens"],
                )
            ),
        ]
        return report(checks)
    hosts = 25 if args.quick else 250
    with contextlib.ExitStack() as stack:
        url = (
            keep_database()
            if args.keep
            else stack.enter_context(scratch_database("gua_bench_scale"))
        )
        upgrade(url)
        t0 = time.perf_counter()
        built = build(url, hosts)
        print(
            f"built {hosts} hosts, {built.gpus:,} GPUs, {DAYS} days up to "
            f"{built.end:%Y-%m-%d %H:00} UTC in {time.perf_counter() - t0:.0f} s"
        )
        if args.keep:
            kept_at = Path(tempfile.gettempdir()) / f"{url.rsplit('/', 1)[1]}.json"
            kept_at.write_text(
                json.dumps(
                    {
                        "url": url,
                        "workspace_id": built.workspace_id,
                        "gpus": built.gpus,
                        "end": built.end.isoformat(),
                        "tokens": built.agent_tokens,
                    }
                )
            )
            kept_at.chmod(0o600)  # agent tokens
            print(f"kept: {kept_at} (measure again: --on {kept_at}; drop: --drop {kept_at})")
        refreshed = Check(
            "day rows of the closed days (maintenance refresh)",
            f"failed: {built.refresh_error}" if built.refresh_error else "made",
            "made",
            built.refresh_error is None,
        )
        measured = asyncio.run(
            measure(url, built.workspace_id, built.gpus, built.end, args.repeat, [])
        )
        return report([refreshed, *measured])


if __name__ == "__main__":
    raise SystemExit(main())
