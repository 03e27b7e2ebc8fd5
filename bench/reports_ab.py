"""Two revisions' reports timed side by side on one kept fleet, call for call.

    .venv/bin/python bench/reports_ab.py --database NAME --before DIR [--after DIR]
                                         [--rounds 9] [--cases usage,util]

A shared machine's load drifts over minutes, so two runs of bench/reports.py minutes
apart differ by more than a change costs. Here one worker process per revision (each
importing its own checkout's board: `--before` a checkout of the old revision, e.g.
`git archive <rev> | tar -x -C DIR`; `--after` this one) runs the same report in turn,
before then after, round after round, on the fleet bench/reports.py --keep loaded; the
medians of the rounds are compared. Bodies are made whole, in process, nothing kept.
The database must be at a schema both revisions can read (the newer one's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (name, days, kind, groupBy, bucket or None, format)
CASES = [
    ("usage groupBy=user, 30 days", 30, "usage", "user", None, "json"),
    ("usage groupBy=user, 90 days", 90, "usage", "user", None, "json"),
    ("usage groupBy=team, 90 days", 90, "usage", "team", None, "json"),
    ("usage groupBy=gpu, 90 days", 90, "usage", "gpu", None, "json"),
    ("usage groupBy=gpu,day, 90 days, csv", 90, "usage", "gpu,day", None, "csv"),
    ("utilization groupBy=gpu bucket=day, 90 days, json", 90, "util", "gpu", "day", "json"),
    ("utilization groupBy=host bucket=day, 90 days, csv", 90, "util", "host", "day", "csv"),
]

WORKER = r"""
import asyncio, sys, time, json
from datetime import timedelta
sys.path.insert(0, sys.argv[1])
import psycopg
from board.app import tune_gc
try:  # the kit package since the structure issue (28); board/reports before it
    from board.reportkit import params
    from board.reportkit.streaming import plain
except ImportError:
    from board.reports import params
    from board.reports.streaming import plain
from board.reports import stream
from board.reports import utilization_stream

async def utilization_body(conn, ws, window, group, bucket, fmt):
    if hasattr(utilization_stream, "utilization_body"):
        return await utilization_stream.utilization_body(conn, ws, window, group, bucket, fmt)
    parts = await utilization_stream.prepare_utilization(conn, ws, window, group, bucket, fmt, None)
    return b"".join([chunk async for chunk in plain(parts)])

async def main():
    tune_gc()
    url = sys.argv[2]
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT w.id, max(d.day_start) + interval '1 day' FROM workspaces w "
            "JOIN gpu_day_rollups d ON d.workspace_id = w.id WHERE w.slug = 'bench' GROUP BY w.id")
        ws, end = await cur.fetchone()
        day = end.date()
        for line in sys.stdin:
            days, kind, group, bucket, fmt = json.loads(line)
            start = (day - timedelta(days=days)).isoformat()
            window = params.parse_window(start, day.isoformat(), None)
            t0 = time.perf_counter()
            if kind == "usage":
                chunks = await stream.prepare_usage(conn, ws, window, tuple(group.split(",")), fmt)
                size = sum([len(c) async for c in chunks])
            else:
                size = len(await utilization_body(conn, ws, window, group, bucket, fmt))
            await conn.commit()
            print(json.dumps([(time.perf_counter() - t0) * 1000, size]), flush=True)

asyncio.run(main())
"""


def start(root: Path, url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(root), url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def call(worker: subprocess.Popen[str], case: tuple[object, ...]) -> tuple[float, int]:
    assert worker.stdin is not None
    assert worker.stdout is not None
    worker.stdin.write(json.dumps(case[1:]) + "\n")
    worker.stdin.flush()
    ms, size = json.loads(worker.stdout.readline())
    return float(ms), int(size)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", required=True)
    parser.add_argument("--before", required=True, type=Path)
    parser.add_argument("--after", type=Path, default=HERE.parent)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--cases", help="cases whose name contains one of these (comma-separated)")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from reports import server_url, with_db

    url = with_db(server_url(), args.database)
    wanted = args.cases.split(",") if args.cases else None
    cases = [c for c in CASES if wanted is None or any(w in c[0] for w in wanted)]
    workers = {"before": start(args.before, url), "after": start(args.after, url)}
    print("| report | before p50 ms | after p50 ms | after / before | body before | body after |")
    print("| --- | --- | --- | --- | --- | --- |")
    try:
        for case in cases:
            times: dict[str, list[float]] = {"before": [], "after": []}
            sizes: dict[str, int] = {}
            for side in workers:  # warm-up: plans, caches
                call(workers[side], case)
            for _ in range(args.rounds):
                for side, worker in workers.items():
                    ms, sizes[side] = call(worker, case)
                    times[side].append(ms)
            before, after = (statistics.median(times[s]) for s in ("before", "after"))
            print(
                f"| {case[0]} | {before:.0f} | {after:.0f} | {after / before:.2f} | "
                f"{sizes['before'] / 1024:.0f} KiB | {sizes['after'] / 1024:.0f} KiB |",
                flush=True,
            )
    finally:
        for worker in workers.values():
            if worker.stdin is not None:
                worker.stdin.close()
            worker.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
