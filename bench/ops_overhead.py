"""What the operations layer adds per request: the request-id/access-log middleware and
the ingest's metric updates, each timed against the same stack without it.

    .venv/bin/python bench/ops_overhead.py [--requests 200000]

Calls a minimal ASGI app directly (no sockets, no HTTP parsing), so the difference is
the middleware alone; the figures are CPU per request, median of 5 rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from board.logs import RequestContextMiddleware  # noqa: E402
from board.metrics.registry import (  # noqa: E402
    ingest_batch_size,
    ingest_commit_seconds,
    observations_accepted,
)

SCOPE: dict[str, Any] = {
    "type": "http",
    "method": "POST",
    "path": "/agent/v1/observations",
    "headers": [(b"content-type", b"application/json"), (b"x-request-id", b"abc-123")],
    "client": ("10.0.0.7", 40000),
}


async def endpoint(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 202, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def send(message: Any) -> None:
    return None


async def per_request(app: Any, n: int) -> float:
    started = time.process_time()
    for _ in range(n):
        await app(dict(SCOPE), receive, send)
    return (time.process_time() - started) / n * 1e6


def metric_updates(n: int) -> float:
    started = time.process_time()
    for _ in range(n):
        observations_accepted.inc()
        ingest_batch_size.observe(32)
        ingest_commit_seconds.observe(0.012)
    return (time.process_time() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    n = parser.parse_args().requests
    # The access log goes to a handler that drops it: the cost of making the line.
    logging.getLogger("board.access").addHandler(logging.NullHandler())
    logging.getLogger("board.access").propagate = False
    logging.getLogger("board.access").setLevel(logging.INFO)
    stacks = {
        "without the middleware (before)": endpoint,
        "request id": RequestContextMiddleware(endpoint),
        "request id + access log": RequestContextMiddleware(endpoint, log_access=True),
    }
    for name, app in stacks.items():
        rounds = [asyncio.run(per_request(app, n // 5)) for _ in range(5)]
        print(f"{name:<34} {statistics.median(rounds):6.2f} us/request")
    rounds = [metric_updates(n // 5) for _ in range(5)]
    print(f"{'ingest metric updates':<34} {statistics.median(rounds):6.2f} us/observation")


if __name__ == "__main__":
    main()
