"""Text array literals against binary bigint arrays, for an upsert-sized statement.

    .venv/bin/python bench/binary_arrays.py [--columns 15] [--rows 384] [--statements 300]

Binds --columns bigint[] parameters of --rows values each (a batch's GPU-hour upsert:
15 columns of 384 rows) to `SELECT 1 FROM unnest(...) LIMIT 1`, --statements times per
way, alternating, and prints this process's CPU and the PostgreSQL backend's CPU per
statement (same machine: the backend's from /proc).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import scratch_database  # noqa: E402

from board.db.pgtext import bigint_array, int_array  # noqa: E402


def backend_cpu(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--columns", type=int, default=15)
    parser.add_argument("--rows", type=int, default=384)
    parser.add_argument("--statements", type=int, default=300)
    args = parser.parse_args()
    # Rollup-like values: ids, hours, and µs sums of many sizes, some zero.
    values = [(i * 7919) % 3_600_000_000 if i % 3 else 0 for i in range(args.rows)]
    statement = "SELECT 1 FROM unnest(" + ", ".join(["%s::bigint[]"] * args.columns) + ") LIMIT 1"
    ways = {"text literal": int_array, "binary": bigint_array}
    with scratch_database() as url, psycopg.connect(url) as conn:
        pid = conn.info.backend_pid
        for _ in range(2):
            for name, make in ways.items():
                cpu0, pg0 = time.process_time(), backend_cpu(pid)
                for _ in range(args.statements):
                    conn.execute(statement, [make(values) for _ in range(args.columns)])
                cpu = (time.process_time() - cpu0) * 1e3 / args.statements
                pg = (backend_cpu(pid) - pg0) * 1e3 / args.statements
                print(f"{name:<13} Python {cpu:.3f} ms  PostgreSQL {pg:.3f} ms per statement")


if __name__ == "__main__":
    main()
