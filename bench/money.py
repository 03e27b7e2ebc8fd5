"""Money benchmark: cost per team over a synthetic fleet's rollups, the report timed.

    .venv/bin/python bench/money.py [--repeat 15] [--days 90] [--keep] [--database NAME]

What it does:
1. creates a scratch database and loads bench/reports.py's fleet (125 hosts × 8 GPUs =
   1,000 GPUs, --days days of hourly rollups of 20 Linux users, day rollups computed);
2. adds what money needs: the 20 users in 5 teams (one user left without a team), EUR,
   a "*" price and an "NVIDIA H100" price that changes halfway through, dated in
   Europe/Berlin so the change falls at 23:00 UTC, inside a UTC day (that day is read
   from its hours);
3. times the usage report with cost through the service the route calls (the rows
   built), then through the ASGI app (auth, the streamed body): groupBy=team,
   team,user, team,day and user over the whole window; the FOCUS export and a month's
   team statements over the last 30 days; median and p95 over --repeat calls after one
   warm-up call;
4. drops the scratch database (unless --keep or --database).

The code before money (no team, no cost) runs the same script from a worktree, against
the database a --keep run left; only the cases that code has are timed:

    git worktree add /tmp/before-money 6dacbbb~1
    cp bench/money.py bench/reports.py /tmp/before-money/bench/
    cd /tmp/before-money && PYTHONPATH=. /work/main/.venv/bin/python bench/money.py \
        --database gua_bench_money_…
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.reports import (  # noqa: E402
    USERS,
    kept_fleet,
    load_fleet,
    member_token,
    server_url,
    timed,
    with_db,
)
from board.app import create_app, tune_gc  # noqa: E402
from board.db.migrate import upgrade  # noqa: E402
from board.reportkit import params  # noqa: E402
from board.reports import service  # noqa: E402
from board.reports.groupings import USAGE_KEYS  # noqa: E402
from board.settings import Settings  # noqa: E402

TEAMS = ["team-a", "team-b", "team-c", "team-d", "team-e"]
ZONE = "Europe/Berlin"


def add_money(url: str, workspace_id: int, start: date, end: date) -> None:
    """Teams in the directory, the currency and the prices (as PUT …/prices stores them)."""
    middle = start + (end - start) / 2
    prices = [("*", start, "1.50"), ("NVIDIA H100", start, "2.40"), ("NVIDIA H100", middle, "2.75")]
    with psycopg.connect(url) as conn:
        for i, user in enumerate(USERS[:-1]):
            conn.execute(
                "INSERT INTO directory_entries (workspace_id, linux_user, team) "
                "VALUES (%s, %s, %s)",
                [workspace_id, user, TEAMS[i % len(TEAMS)]],
            )
        conn.execute(
            "INSERT INTO workspace_currencies (workspace_id, currency, minor_units) "
            "VALUES (%s, 'EUR', 2)",
            [workspace_id],
        )
        for model, day, price in prices:
            conn.execute(
                "INSERT INTO prices (workspace_id, gpu_model, valid_from, starts_at, zone, "
                "per_gpu_hour) VALUES (%s, %s, %s, (%s::timestamp AT TIME ZONE %s), %s, %s)",
                [workspace_id, model, day, day, ZONE, ZONE, price],
            )
        conn.execute("UPDATE workspaces SET timezone = %s WHERE id = %s", [ZONE, workspace_id])
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("prices", "workspace_currencies", "directory_entries"):
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))


async def measure(
    url: str, workspace_id: int, end: datetime, days: int, repeat: int, service_only: bool
) -> None:
    tune_gc()
    day = end.date()
    start = (day - timedelta(days=days)).isoformat()
    window = params.parse_window(start, day.isoformat(), "UTC")
    month_start = (day - timedelta(days=30)).isoformat()
    rows: list[list[str]] = []
    # The code before money knows no team, no FOCUS and no statements.
    with_money = "team" in USAGE_KEYS
    groupings: list[tuple[str, ...]] = [("team",), ("team", "user"), ("team", "day"), ("user",)]
    groupings = groupings if with_money else [("user",)]
    async with await psycopg.AsyncConnection.connect(url) as conn:
        for keys in groupings:

            async def run(keys: tuple[str, ...] = keys) -> Any:
                report = await service.usage_report(conn, workspace_id, window, keys)
                await conn.commit()
                return report

            median, p95, report = await timed(run, repeat)
            rows.append(
                [
                    f"usage groupBy={','.join(keys)}, {days} days, service",
                    f"{len(report.rows):,}",
                    f"{median:.0f}",
                    f"{p95:.0f}",
                ]
            )

        if with_money:
            from board.money import statements

            month = statements.month_window(date.fromisoformat(month_start).replace(day=1), ZONE)

            async def statement() -> Any:
                found = await statements.month_figures(conn, workspace_id, month)
                await conn.commit()
                return found

            median, p95, (_, teams) = await timed(statement, repeat)
            rows.append(
                [
                    "team statements, one month, service",
                    f"{len(teams)}",
                    f"{median:.0f}",
                    f"{p95:.0f}",
                ]
            )

    if not service_only:
        rows += await api_cases(url, groupings, start, month_start, day, days, repeat, with_money)
    print(f"{'case':<46} {'rows':>8} {'median ms':>10} {'p95 ms':>8}")
    for case, found, mid, slow in rows:
        print(f"{case:<46} {found:>8} {mid:>10} {slow:>8}")


async def api_cases(
    url: str,
    groupings: list[tuple[str, ...]],
    start: str,
    month_start: str,
    day: date,
    days: int,
    repeat: int,
    with_money: bool,
) -> list[list[str]]:
    """The same reports through the ASGI app: auth, the route, the streamed body."""
    rows: list[list[str]] = []
    app = create_app(Settings(database_url=url), run_maintenance=False)
    async with app.router.lifespan_context(app):
        headers = {"Authorization": f"Bearer {await member_token(app)}"}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            cases: list[tuple[str, str, dict[str, str]]] = [
                (
                    f"usage groupBy={','.join(k)}, {days} days, API",
                    "usage",
                    {"from": start, "to": day.isoformat(), "groupBy": ",".join(k), "tz": "UTC"},
                )
                for k in groupings
            ]
            if with_money:
                focus = {"from": month_start, "to": day.isoformat()}
                cases.append(("FOCUS export, 30 days, API", "focus", focus))
            for name, kind, query in cases:

                async def get(kind: str = kind, query: dict[str, str] = query) -> bytes:
                    r = await client.get(
                        f"/api/v1/workspaces/bench/reports/{kind}", params=query, headers=headers
                    )
                    assert r.status_code == 200, r.text
                    return r.content

                median, p95, body = await timed(get, repeat)
                count = (
                    body.count(b"\r\n") - 1 if kind == "focus" else body.count(b'"heldGpuHours"')
                )
                rows.append([name, f"{count:,}", f"{median:.0f}", f"{p95:.0f}"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--database", help="a database kept by an earlier --keep run")
    parser.add_argument("--service-only", action="store_true", help="skip the API cases")
    args = parser.parse_args()
    admin = server_url()
    name = args.database or f"gua_bench_money_{datetime.now(UTC):%H%M%S}"
    url = with_db(admin, name)
    try:
        if args.database:
            workspace_id, end = kept_fleet(url)
        else:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            upgrade(url)
            end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
            workspace_id, _, _ = load_fleet(url, args.days, end)
            add_money(url, workspace_id, (end - timedelta(days=args.days)).date(), end.date())
            print(f"fleet loaded in {name}")
        asyncio.run(measure(url, workspace_id, end, args.days, args.repeat, args.service_only))
    finally:
        if not (args.keep or args.database):
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
