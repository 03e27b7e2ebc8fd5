"""The live stream through PostgreSQL NOTIFY/LISTEN against handing samples over in the
process, on one board process: CPU and time per sample, and that every sample arrives.

    .venv/bin/python bench/stream_fanout.py [--hosts 300] [--seconds 10]

`--hosts` agents each send one 8-GPU sample a second (the agent's rate) for `--seconds`;
one subscriber watches the workspace. "in process" calls the hub's deliver() directly
(what a single process would do without the fan-out); "NOTIFY" is what the board does.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import scratch_database  # noqa: E402
from board.stream.hub import StreamHub  # noqa: E402
from board.stream.samples import Sample  # noqa: E402

GPUS = tuple((f"GPU-{i:08x}-0000-0000-0000-000000000000", 87, 40960) for i in range(8))


async def run(url: str, hosts: int, seconds: int, via_notify: bool) -> tuple[float, float, int]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(url, min_size=1, max_size=6, open=False)
    await pool.open(wait=True)
    hub = StreamHub()
    if via_notify:
        await hub.start(url, pool)
        assert await hub.wait_listening(10)
    expected = hosts * seconds
    got = 0
    with hub.subscribe(1) as sub:
        cpu, wall = time.process_time(), time.perf_counter()
        for second in range(seconds):
            for h in range(hosts):
                sample = Sample(1, f"host-{h}", time.time(), GPUS)
                if via_notify:
                    hub.publish(sample)
                else:
                    hub.deliver(sample)
            # Drain what arrived so far (a browser's SSE loop does this).
            while got < (second + 1) * hosts:
                try:
                    async with asyncio.timeout(10):
                        await sub.get()
                except TimeoutError:
                    break
                got += 1
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await hub.stop()
    await pool.close()
    return cpu / expected * 1e6, wall / expected * 1e6, got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    with scratch_database("gua_stream") as url:
        with psycopg.connect(url):
            pass
        for name, notify in (("in process", False), ("NOTIFY/LISTEN", True)) * 2:
            cpu, wall, got = asyncio.run(run(url, args.hosts, args.seconds, notify))
            print(
                f"{name:<14} {cpu:7.1f} us CPU/sample {wall:7.1f} us wall/sample "
                f"{got}/{args.hosts * args.seconds} delivered"
            )


if __name__ == "__main__":
    main()
