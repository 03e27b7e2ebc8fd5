"""The ingest batch's bookings read when hosts have a long booking history.

    .venv/bin/python bench/bookings_read.py [--hosts 300] [--past-days 365] [--batch 48]
                                            [--repeat 60]

Creates a scratch database (dropped at the end), --hosts hosts of 8 GPUs, and for each
host one booking of all its GPUs per day for the last --past-days days (a lab that books
every day for a year: 300 x 365 bookings, 876,000 booked GPU ranges), plus today's (in
force now) and tomorrow's. Then runs the read ingest sends with its host lock
(`board.reservations.store._BATCH_BOOKINGS`) for batches of --batch hosts whose new
points are the last 30 s, --repeat times, and prints the median and 90th percentile in
milliseconds and the buffers one read touches (EXPLAIN ANALYZE). Run it against the code
before a change with PYTHONPATH pointing at that checkout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import scratch_database  # noqa: E402

from board.db.migrate import upgrade  # noqa: E402
from board.db.pgtext import int_array, text_array  # noqa: E402
from board.reservations.store import _BATCH_BOOKINGS  # noqa: E402

_SEED = """
WITH ws AS (INSERT INTO workspaces (slug, name) VALUES ('bench', 'Bench') RETURNING id),
     u AS (INSERT INTO users (email) VALUES ('alice@bench.example') RETURNING id),
     h AS (
        INSERT INTO hosts (workspace_id, public_id, display_name, agent_token_hash,
                           agent_token_prefix)
        SELECT ws.id, gen_random_uuid(), 'bench-' || i, decode(md5(i::text), 'hex'), 'x'
        FROM ws, generate_series(1, %(hosts)s) AS i
        RETURNING workspace_id, id)
INSERT INTO gpus (workspace_id, host_id, uuid, gpu_index, name, memory_total_mb)
SELECT h.workspace_id, h.id, 'GPU-' || g, g, 'bench', 81920
FROM h, generate_series(0, 7) AS g
"""

# One booking per host and day: tomorrow's, today's (in force now) and the past days'.
_BOOKINGS = """
WITH r AS (
    INSERT INTO reservations (workspace_id, public_id, host_id, user_id, linux_users,
                              during, created_by)
    SELECT h.workspace_id, gen_random_uuid(), h.id, u.id, ARRAY['alice'],
           tstzrange(%(today)s - d * interval '1 day', %(today)s - (d - 1) * interval '1 day'),
           u.id
    FROM hosts h, users u, generate_series(0, %(days)s + 1) AS d
    RETURNING workspace_id, id, host_id, during)
INSERT INTO reservation_gpus (workspace_id, reservation_id, gpu_id, host_id, during)
SELECT r.workspace_id, r.id, g.id, r.host_id, r.during
FROM r JOIN gpus g ON g.workspace_id = r.workspace_id AND g.host_id = r.host_id
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--past-days", type=int, default=365)
    parser.add_argument("--batch", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=60)
    args = parser.parse_args()
    with scratch_database("gua_bench_bookings") as url:
        upgrade(url)
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(_SEED, {"hosts": args.hosts})
            started = time.perf_counter()
            conn.execute(_BOOKINGS, {"today": today + timedelta(days=1), "days": args.past_days})
            conn.execute("ANALYZE")
            rows = conn.execute("SELECT count(*) FROM reservation_gpus").fetchone()
            print(
                f"{rows[0] if rows else 0:,} booked GPU ranges made in "
                f"{time.perf_counter() - started:.1f} s"
            )
            hosts = [r[0] for r in conn.execute("SELECT id FROM hosts ORDER BY id").fetchall()]
            ws = conn.execute("SELECT id FROM workspaces").fetchone()
            assert ws is not None
            now = datetime.now(UTC)
            timings: list[float] = []
            found = 0
            for i in range(args.repeat):
                start = (i * args.batch) % max(1, len(hosts) - args.batch + 1)
                batch = hosts[start : start + args.batch]
                params = [
                    int_array([ws[0]] * len(batch)),
                    int_array(batch),
                    text_array([(now - timedelta(seconds=30)).isoformat()] * len(batch)),
                    text_array([now.isoformat()] * len(batch)),
                ]
                t0 = time.perf_counter()
                found = len(conn.execute(_BATCH_BOOKINGS, params).fetchall())
                timings.append((time.perf_counter() - t0) * 1e3)
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + _BATCH_BOOKINGS, params)
            buffers = [r[0] for r in plan.fetchall() if "Buffers" in r[0]][:1]
    timings.sort()
    p90 = timings[int(0.9 * (len(timings) - 1))]
    print(
        f"batch of {args.batch} hosts, {found} booked GPUs found: "
        f"p50 {statistics.median(timings):.2f} ms, p90 {p90:.2f} ms; "
        f"{buffers[0].strip() if buffers else ''}"
    )


if __name__ == "__main__":
    main()
