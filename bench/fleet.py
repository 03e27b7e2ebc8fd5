"""The fleet page at scale, as a browser gets it: 300 hosts x 8 GPUs, 2 processes each.

1. a scratch database, migrated; a workspace with an admin who signs in with a password;
2. `gua-board serve --workers 2` on a free loopback port (the code under test: run with
   PYTHONPATH=<other checkout> to measure another revision, e.g. the code before);
3. --hosts hosts enrolled and pushed --pushes observations each through the agent API
   (8 GPUs, 2 processes each; a mix of active, idle-held and free cards);
4. signed in over HTTP, each page fetched --repeat times with `Accept-Encoding: gzip`:
   the bytes on the wire, and the wall time on loopback (the server's time plus a
   loopback round trip), median and p95. The first page is measured three ways: after
   every host pushed a new observation (the board reads every host's newest GPUs, as a
   process's first read does), after a sixth of them did (agents pushing every 30 s, a
   page loaded every 5 s), and with nothing pushed between loads.

    .venv/bin/python bench/fleet.py --hosts 300 --repeat 15
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    free_port,
    scratch_database,
    start_server,
    stop_server,
    venv_script,
    wait_healthy,
)

WORKSPACE = "bench"
PASSWORD = "bench-password-fleet"
USERS = [f"user{n:02d}" for n in range(40)] + ["bob", "alice"]


def snapshot(i: int, at: datetime) -> dict[str, Any]:
    gpus = []
    for g in range(8):
        kind = (i * 8 + g) % 5  # 2/5 active, 1/5 idle-held, 2/5 free
        users = [USERS[(i + g) % len(USERS)], USERS[(i * 3 + g) % len(USERS)]]
        held = kind < 3
        gpus.append(
            {
                "index": g,
                "uuid": f"GPU-{i:04d}-{g}",
                "name": "NVIDIA H100 80GB HBM3",
                "memoryTotalMb": 81559,
                "utilPct": 90 if kind < 2 else 0,
                "memoryUsedMb": 40000 if held else 0,
                "temperatureC": 50,
                "powerW": 300,
                "processes": [
                    {
                        "pid": 1000 + n,
                        "linuxUser": u,
                        "name": "python",
                        "type": "compute",
                        "memoryUsedMb": 20000,
                    }
                    for n, u in enumerate(users)
                ]
                if held
                else [],
                "usageState": "active" if kind < 2 else ("idle_held" if kind == 2 else "idle"),
            }
        )
    return {
        "schemaVersion": "availability.snapshot.v1",
        "collectionStatus": "ok",
        "observedAt": at.isoformat(),
        "host": {"hostname": f"gpu-{i:03d}", "agentVersion": "1.8.0", "driverVersion": "560"},
        "gpus": gpus,
        "errors": [],
    }


async def prepare(url: str) -> str:
    import psycopg

    from board.db.engine import make_engine, make_sessionmaker
    from board.observations.maintenance import run_maintenance
    from board.workspaces import service

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await run_maintenance(conn, retention_days=35, ahead_days=3)
    engine = make_engine(url, pool_size=1)
    try:
        async with make_sessionmaker(engine)() as session:
            workspace = await service.create_workspace(session, WORKSPACE, "Benchmark")
            admin = await service.add_member(
                session, workspace, "admin@bench.example", "admin", PASSWORD
            )
            await session.commit()
            return admin.api_token
    finally:
        await engine.dispose()


async def load(base: str, admin_token: str, hosts: int, pushes: int) -> list[str]:
    """Enroll and push; the hosts' agent tokens, by host number."""
    admin = {"Authorization": f"Bearer {admin_token}"}
    gate = asyncio.Semaphore(8)
    start = datetime.now(UTC) - timedelta(seconds=30 * pushes)
    tokens = [""] * hosts
    async with httpx.AsyncClient(base_url=base, timeout=60.0) as client:

        async def one(i: int) -> None:
            async with gate:
                issued = await client.post(
                    f"/api/v1/workspaces/{WORKSPACE}/enrollment-tokens",
                    json={"displayName": f"gpu-{i:03d}"},
                    headers=admin,
                )
                claimed = await client.post(
                    "/agent/v1/enrollments/claim",
                    json={"enrollmentToken": issued.json()["enrollmentToken"]},
                )
                token = tokens[i] = claimed.json()["agentToken"]
                for n in range(pushes):
                    r = await client.post(
                        "/agent/v1/observations",
                        json=snapshot(i, start + timedelta(seconds=30 * n + i % 30)),
                        headers={"Authorization": f"Bearer {token}"},
                    )
                    assert r.status_code == 202, r.text

        await asyncio.gather(*(one(i) for i in range(hosts)))
    return tokens


async def push_now(client: httpx.AsyncClient, tokens: list[str], hosts: range) -> None:
    """One new observation (now) for each of these hosts, as their agents would send."""
    gate = asyncio.Semaphore(8)
    at = datetime.now(UTC)

    async def one(i: int) -> None:
        async with gate:
            r = await client.post(
                "/agent/v1/observations",
                json=snapshot(i, at),
                headers={"Authorization": f"Bearer {tokens[i]}"},
            )
            assert r.status_code == 202, r.text

    await asyncio.gather(*(one(i) for i in hosts))


async def sign_in(client: httpx.AsyncClient) -> None:
    form = await client.get("/signin")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert csrf, "no sign-in form"
    r = await client.post(
        "/signin",
        data={
            "csrf_token": csrf.group(1),
            "email": "admin@bench.example",
            "password": PASSWORD,
            "next": "/",
        },
    )
    assert r.status_code in (200, 303), r.status_code


async def fetch(
    client: httpx.AsyncClient, path: str, headers: dict[str, str] | None = None
) -> tuple[int, float, int, str | None]:
    """(status, milliseconds, compressed bytes on the wire incl. headers, ETag)."""
    t0 = time.perf_counter()
    async with client.stream(
        "GET", path, headers={"Accept-Encoding": "gzip", **(headers or {})}
    ) as r:
        await r.aread()
        ms = (time.perf_counter() - t0) * 1000
        head = sum(len(k) + len(v) + 4 for k, v in r.headers.raw)
        return r.status_code, ms, r.num_bytes_downloaded + head, r.headers.get("etag")


def stats(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.95) - 1)]


async def measure_pushed(
    client: httpx.AsyncClient, repeat: int, tokens: list[str], share: int, settle: float
) -> list[str]:
    """The first page when 1/`share` of the hosts pushed since the last load (the board
    reads those hosts' newest GPUs again; 1/1: every host, as a process's first read).

    `settle`: seconds between the pushes and the load, as agents' pushes are spread out
    (a burst of them leaves the server's follow-up work on the same cores)."""
    path = f"/w/{WORKSPACE}/"
    times = []
    size = 0
    for n in range(repeat):
        # A different slice each time, as agents on a 30 s interval push in turn.
        count = len(tokens) // share
        first = (n * count) % len(tokens)
        await push_now(client, tokens, range(first, min(first + count, len(tokens))))
        await asyncio.sleep(settle)
        status, ms, size, _ = await fetch(client, path)
        assert status == 200, status
        times.append(ms)
    median, p95 = stats(times)
    name = (
        "fleet page, every host pushed since the last load"
        if share == 1
        else f"fleet page, 1/{share} of the hosts pushed since the last load"
    )
    return [name, "200", f"{size / 1024:.1f} KB", f"{median:.0f}", f"{p95:.0f}"]


async def measure(
    base: str, repeat: int, api_token: str, tokens: list[str], settle: float
) -> list[list[str]]:
    table: list[list[str]] = []
    async with httpx.AsyncClient(base_url=base, timeout=60.0) as client:
        await sign_in(client)
        cases = [
            ("fleet page (first load)", f"/w/{WORKSPACE}/", None),
            ("fleet page, cards view", f"/w/{WORKSPACE}/?view=cards", None),
            ("fleet.json refresh (changed)", f"/w/{WORKSPACE}/fleet.json", None),
            ("fleet.json refresh (unchanged)", f"/w/{WORKSPACE}/fleet.json", "etag"),
            ("search: a user", f"/w/{WORKSPACE}/?q=bob", None),
            ("search: a host", f"/w/{WORKSPACE}/?q=gpu-123", None),
            ("group by user, sort idle-held", f"/w/{WORKSPACE}/?group=user&sort=idle_held", None),
            ("people view", f"/w/{WORKSPACE}/people", None),
            ("hosts API", f"/api/v1/workspaces/{WORKSPACE}/hosts", None),
            ("hosts API ?q=bob", f"/api/v1/workspaces/{WORKSPACE}/hosts?q=bob", None),
        ]
        for name, path, conditional in cases:
            headers: dict[str, str] = {}
            if path.startswith("/api/"):
                headers["Authorization"] = f"Bearer {api_token}"
            if conditional:
                _, _, _, etag = await fetch(client, path, headers)
                if etag is None:
                    table.append([name, "no ETag", "–", "–", "–"])
                    continue
                headers["If-None-Match"] = etag
            status, _, _, _ = await fetch(client, path, headers)
            if status not in (200, 304):
                table.append([name, f"HTTP {status}", "–", "–", "–"])
                continue
            times, size, statuses = [], 0, []
            for _ in range(repeat):
                status, ms, size, etag = await fetch(client, path, headers)
                times.append(ms)
                statuses.append(status)
                if conditional and status == 200 and etag:
                    # As the browser does: the page's minute rolled over, keep the new one.
                    headers["If-None-Match"] = etag
            median, p95 = stats(times)
            shown = str(status)
            if conditional:
                shown = f"{statuses.count(304)}/{len(statuses)} × 304"
            table.append([name, shown, f"{size / 1024:.1f} KB", f"{median:.0f}", f"{p95:.0f}"])
        # Last: the pushes leave work behind (rollups) that would slow the cases above.
        table.append(await measure_pushed(client, repeat, tokens, 6, settle))
        table.append(await measure_pushed(client, repeat, tokens, 1, settle))
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--pushes", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--settle", type=float, default=0.0, help="seconds between pushes and the page load"
    )
    args = parser.parse_args()
    from board.db.migrate import upgrade

    log_dir = Path(tempfile.mkdtemp(prefix="gua-bench-fleet-"))
    with scratch_database("gua_bench_fleet") as url:
        upgrade(url)
        admin_token = asyncio.run(prepare(url))
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
            tokens = asyncio.run(load(server.base_url, admin_token, args.hosts, args.pushes))
            print(
                f"loaded {args.hosts} hosts x 8 GPUs, {args.pushes} pushes each, "
                f"in {time.monotonic() - t0:.1f}s",
                file=sys.stderr,
            )
            table = asyncio.run(
                measure(server.base_url, args.repeat, admin_token, tokens, args.settle)
            )
        finally:
            stop_server(server)
    print(f"| {args.hosts} hosts x 8 GPUs | status | on the wire (gzip) | median ms | p95 ms |")
    print("| --- | --- | --- | --- | --- |")
    for row in table:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
