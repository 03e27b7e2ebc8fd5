"""GET …/capacity at fleet scale: 300 hosts x 8 GPUs, a month of bookings, some windows.

    .venv/bin/python bench/capacity.py [--hosts 300] [--past-days 30] [--repeat 50]

Creates a scratch database (dropped at the end), migrated; a workspace with a member
and a personal API token; --hosts hosts of 8 GPUs whose newest observation is a few
seconds old (a mix of busy and free cards, memory used from 0 to 60 GiB), one booking of
two GPUs per host and day for the last --past-days days and the next 7 (a busy lab), and
a maintenance window on every 20th host (daily, in Europe/Berlin). Then asks the API in
process (httpx over ASGI: auth, parameters, the query, the JSON) each question --repeat
times and prints the median and 90th percentile in milliseconds and the answer's size;
then times what the fleet page adds to each load, its health read, in process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import scratch_database  # noqa: E402

from board.app import create_app  # noqa: E402
from board.db.migrate import upgrade  # noqa: E402
from board.health.status import fleet_health  # noqa: E402
from board.settings import Settings  # noqa: E402
from board.workspaces import service as workspaces  # noqa: E402

_HOSTS = """
INSERT INTO hosts (workspace_id, public_id, display_name, agent_token_hash, agent_token_prefix,
                   latest_observed_at, latest_received_at, latest_collection_status)
SELECT %(ws)s, gen_random_uuid(), 'node-' || lpad(i::text, 3, '0'), decode(md5(i::text), 'hex'),
       'x', %(now)s, %(now)s, 'ok'
FROM generate_series(1, %(hosts)s) AS i
"""
_GPUS = """
INSERT INTO gpus (workspace_id, host_id, uuid, gpu_index, name, memory_total_mb)
SELECT h.workspace_id, h.id, 'GPU-' || g, g,
       CASE WHEN h.id %% 3 = 0 THEN 'NVIDIA H100 80GB HBM3' ELSE 'NVIDIA A100-SXM4-80GB' END,
       81920
FROM hosts h, generate_series(0, 7) AS g WHERE h.workspace_id = %(ws)s
"""
# Two GPUs of each host booked for one day, every day in [-past, +7].
_BOOKINGS = """
WITH r AS (
    INSERT INTO reservations (workspace_id, public_id, host_id, user_id, linux_users,
                              during, created_by)
    SELECT h.workspace_id, gen_random_uuid(), h.id, %(user)s, ARRAY['alice'],
           tstzrange(%(today)s + d * interval '1 day', %(today)s + (d + 1) * interval '1 day'),
           %(user)s
    FROM hosts h, generate_series(-%(days)s, 7) AS d WHERE h.workspace_id = %(ws)s
    RETURNING workspace_id, id, host_id, during)
INSERT INTO reservation_gpus (workspace_id, reservation_id, gpu_id, host_id, during)
SELECT r.workspace_id, r.id, g.id, r.host_id, r.during
FROM r JOIN gpus g ON g.workspace_id = r.workspace_id AND g.host_id = r.host_id
WHERE g.gpu_index = (extract(doy FROM lower(r.during))::int + r.host_id) %% 8
   OR g.gpu_index = (extract(doy FROM lower(r.during))::int + r.host_id + 3) %% 8
"""
_WINDOWS = """
INSERT INTO host_maintenance_windows (workspace_id, public_id, host_id, starts_at, ends_at,
                                      recurrence, zone)
SELECT workspace_id, gen_random_uuid(), id, %(start)s, %(start)s + interval '2 hours',
       'daily', 'Europe/Berlin'
FROM hosts WHERE workspace_id = %(ws)s AND id %% 20 = 0
"""


def ticks(conn: psycopg.Connection[Any], workspace_id: int) -> None:
    """Each host's newest tick: 3 of 8 GPUs busy, memory used 0-60 GiB."""
    rows = conn.execute(
        "SELECT host_id, id, gpu_index FROM gpus WHERE workspace_id = %s ORDER BY host_id, id",
        [workspace_id],
    ).fetchall()
    by_host: dict[int, list[list[Any]]] = {}
    for host_id, gpu_id, index in rows:
        busy = (host_id + index) % 8 < 3
        used = ((host_id * 7 + index * 13) % 8) * 7680 if busy else (index % 3) * 512
        state = "active" if busy else "idle"
        holders = [f"user{(host_id + index) % 40:02d}"] if busy else []
        by_host.setdefault(host_id, []).append(
            [gpu_id, state, 90 if busy else 0, used, 81920, holders, None, 300]
        )
    with conn.cursor() as cur:
        cur.executemany(
            "UPDATE hosts SET latest_tick = %s WHERE workspace_id = %s AND id = %s",
            [(json.dumps(t), workspace_id, h) for h, t in by_host.items()],
        )


async def run(url: str, args: argparse.Namespace) -> None:
    settings = Settings(database_url=url, data_dir=Path(tempfile.mkdtemp(prefix="gua-bench-")))
    app = create_app(settings, run_maintenance=False)
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        async with runtime.sessions() as session:
            workspace = await workspaces.create_workspace(session, "bench", "Bench")
            member = await workspaces.add_member(
                session, workspace, "alice@bench.example", "member", None
            )
            await session.commit()
            workspace_id, user_id, token = workspace.id, member.user.id, member.api_token
        now = datetime.now(UTC)
        today = now.replace(hour=0, minute=0, second=0, microsecond=0)
        with psycopg.connect(url, autocommit=True) as conn:
            seed = {"ws": workspace_id, "now": now, "hosts": args.hosts}
            conn.execute(_HOSTS, seed)
            conn.execute(_GPUS, seed)
            ticks(conn, workspace_id)
            booked = {"ws": workspace_id, "user": user_id, "today": today, "days": args.past_days}
            conn.execute(_BOOKINGS, booked)
            conn.execute(_WINDOWS, {"ws": workspace_id, "start": today - timedelta(days=3)})
            conn.execute("ANALYZE")
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM gpus), (SELECT count(*) FROM reservation_gpus), "
                "(SELECT count(*) FROM host_maintenance_windows)"
            ).fetchone()
        print(
            f"{args.hosts} hosts, {counts[0]} GPUs, {counts[1]} booked GPU-days, "
            f"{counts[2]} daily windows"
        )
        tomorrow = (today + timedelta(days=1)).date().isoformat()
        questions = {
            "now, 4 GPUs on one host": {"gpus": "4"},
            "now, 4 GPUs, 40 GiB free, model": {
                "gpus": "4",
                "minFreeMemoryMb": "40960",
                "model": "a100",
            },
            "tomorrow 09-17, 8 GPUs on one host": {
                "gpus": "8",
                "from": f"{tomorrow}T09:00",
                "to": f"{tomorrow}T17:00",
            },
            "tomorrow 09-17, 64 GPUs on any hosts": {
                "gpus": "64",
                "sameHost": "false",
                "from": f"{tomorrow}T09:00",
                "to": f"{tomorrow}T17:00",
            },
            "now, 1024 GPUs on any hosts": {"gpus": "1024", "sameHost": "false"},
        }
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            print("| question | median ms | p90 ms | answer | fits |")
            print("| --- | --- | --- | --- | --- |")
            for name, params in questions.items():
                times = []
                for _ in range(args.repeat):
                    started = time.perf_counter()
                    r = await client.get(
                        "/api/v1/workspaces/bench/capacity", params=params, headers=headers
                    )
                    times.append((time.perf_counter() - started) * 1000)
                    assert r.status_code == 200, r.text
                times.sort()
                p90 = times[int(len(times) * 0.9) - 1]
                body = r.json()
                print(
                    f"| {name} | {statistics.median(times):.1f} | {p90:.1f} | "
                    f"{len(r.content) / 1024:.1f} KB, {len(body['candidates'])} hosts | "
                    f"{body['fits']} |"
                )

        # What the fleet page adds to each load: its health read (board.health.status).
        times = []
        for _ in range(args.repeat):
            async with runtime.sessions() as session:
                started = time.perf_counter()
                await fleet_health(session, workspace_id, datetime.now(UTC))
                times.append((time.perf_counter() - started) * 1000)
        times.sort()
        print(
            f"| the fleet page's health read (in process) | {statistics.median(times):.1f} | "
            f"{times[int(len(times) * 0.9) - 1]:.1f} | | |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--past-days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    with scratch_database("gua_bench_capacity") as url:
        upgrade(url)
        asyncio.run(run(url, args))


if __name__ == "__main__":
    main()
