"""The reports through a served board, as a browser or a BI tool gets them.

Used by `bench/reports.py --served` (see there): starts `gua-board serve --workers 1`
(one process: the worker whose memory is measured) with PYTHONPATH set to the checkout
this file belongs to, so a copy of the bench in another worktree serves that worktree's
code. For each report it times the first body byte and the whole body over HTTP
(streamed by the client, not kept), and reads the worker's peak RSS from the kernel:
/proc/<pid>/status VmHWM, reset before each request by writing 5 to
/proc/<pid>/clear_refs, so each figure is that request's own peak. Server CPU per
request comes from the process's CPU times.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402  (bench/ is not a package; see sys.path above)
    REPO_ROOT,
    free_port,
    start_server,
    stop_server,
    venv_script,
    wait_healthy,
)


@dataclass(frozen=True)
class ServedCase:
    name: str
    kind: str  # usage or utilization
    query: dict[str, str]
    days: int
    heavy: bool = False  # millions of rows: fewer repeats


def served_cases() -> list[ServedCase]:
    cases = []
    for fmt in ("json", "csv"):
        cases += [
            ServedCase(
                f"utilization groupBy=gpu bucket=hour, 90 d, {fmt}",
                "utilization",
                {"groupBy": "gpu", "bucket": "hour", "format": fmt},
                90,
                heavy=True,
            ),
            ServedCase(
                f"utilization groupBy=host bucket=hour, 90 d, {fmt}",
                "utilization",
                {"groupBy": "host", "bucket": "hour", "format": fmt},
                90,
            ),
            ServedCase(
                f"utilization groupBy=gpu bucket=day, 90 d, {fmt}",
                "utilization",
                {"groupBy": "gpu", "bucket": "day", "format": fmt},
                90,
            ),
            ServedCase(
                f"usage groupBy=gpu,day, 90 d, {fmt}",
                "usage",
                {"groupBy": "gpu,day", "format": fmt},
                90,
            ),
            ServedCase(
                f"usage groupBy=gpu, 90 d, {fmt}", "usage", {"groupBy": "gpu", "format": fmt}, 90
            ),
            ServedCase(
                f"usage groupBy=user, 90 d, {fmt}", "usage", {"groupBy": "user", "format": fmt}, 90
            ),
        ]
    return cases


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak(pid: int) -> None:
    """VmHWM back to the current RSS (Linux >= 4.0, same user)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


@dataclass
class Sample:
    ttfb_ms: float
    total_ms: float
    size: int
    rss_before_kb: int
    peak_kb: int
    cpu_ms: float


async def _fetch(base_url: str, token: str, path: str, params: dict[str, str], pid: int) -> Sample:
    """One report on a new connection (a keep-alive connection idle through a long
    report may be closed by the server's deadlines just as the next request goes out)."""
    proc = psutil.Process(pid)
    _reset_peak(pid)
    before_kb = _status_kb(pid, "VmRSS")
    cpu0 = sum(proc.cpu_times()[:2])
    t0 = time.perf_counter()
    first: float | None = None
    size = 0
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(base_url=base_url, headers=headers, timeout=300.0) as client,
        client.stream("GET", path, params=params) as response,
    ):
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"{path} {params}: {response.status_code} {response.text[:300]}")
        async for chunk in response.aiter_raw():
            if first is None and chunk:
                first = time.perf_counter()
            size += len(chunk)
    total = time.perf_counter()
    cpu1 = sum(proc.cpu_times()[:2])
    return Sample(
        ((first or total) - t0) * 1000,
        (total - t0) * 1000,
        size,
        before_kb,
        _status_kb(pid, "VmHWM"),
        (cpu1 - cpu0) * 1000,
    )


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def _measure(
    base_url: str,
    token: str,
    pid: int,
    day: date,
    repeat: int,
    heavy_repeat: int,
    only: list[str] | None = None,
) -> list[list[str]]:
    table = []
    for case in served_cases():
        if only and not any(part in case.name for part in only):
            continue
        params = {
            "from": (day - timedelta(days=case.days)).isoformat(),
            "to": day.isoformat(),
            **case.query,
        }
        path = f"/api/v1/workspaces/bench/reports/{case.kind}"
        # Warm-up: plans, caches, imports; and the utilization report's kept bodies when
        # the days were not reported before (its figures are the last two columns).
        warm = await _fetch(base_url, token, path, params, pid)
        runs = heavy_repeat if case.heavy else repeat
        samples = [await _fetch(base_url, token, path, params, pid) for _ in range(runs)]
        totals = [s.total_ms for s in samples]
        table.append(
            [
                case.name,
                f"{statistics.median(s.ttfb_ms for s in samples):,.0f}",
                f"{statistics.median(totals):,.0f}",
                f"{_p95(totals):,.0f}",
                f"{statistics.median(s.cpu_ms for s in samples):,.0f}",
                f"{max(s.rss_before_kb for s in samples) / 1024:,.0f}",
                f"{max(s.peak_kb for s in samples) / 1024:,.0f}",
                _size(samples[-1].size),
                str(runs),
                f"{warm.total_ms:,.0f}",
                f"{warm.peak_kb / 1024:,.0f}",
            ]
        )
        print("  " + " | ".join(table[-1]), file=sys.stderr, flush=True)
    return table


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 1024:,.0f} KiB"


SERVED_HEADER = [
    "report (served, 1 worker)",
    "first byte p50 ms",
    "total p50 ms",
    "total p95 ms",
    "server CPU p50 ms",
    "RSS before MiB",
    "peak RSS MiB",
    "body",
    "runs",
    "warm-up total ms",
    "warm-up peak RSS MiB",
]


def board_source(env: dict[str, str]) -> str:
    """Where the served process will import `board` from (checked, not assumed)."""
    out = subprocess.run(
        [sys.executable, "-c", "import board; print(board.__file__)"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def measure_served(
    url: str, token: str, day: date, repeat: int, heavy_repeat: int, only: list[str] | None = None
) -> list[list[str]]:
    """Serve the board of this checkout on `url` and time the reports through it."""
    log_dir = Path(tempfile.mkdtemp(prefix="gua-bench-reports-"))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "GUA_BOARD_DATABASE_URL": url,
        "GUA_BOARD_DATA_DIR": str(log_dir / "data"),
        "GUA_BOARD_SECRET_KEY": secrets.token_urlsafe(48),
        "GUA_BOARD_LOG_LEVEL": "warning",
    }
    source = board_source(env)
    if not source.startswith(str(REPO_ROOT)):
        raise SystemExit(f"the served board would import {source}, not {REPO_ROOT}'s")
    print(f"serving board from {source}", file=sys.stderr)
    port = free_port()
    argv = [venv_script("gua-board"), "serve", "--workers", "1", "--port", str(port)]
    server = start_server("board", argv, env, port, log_dir)
    try:
        wait_healthy(server)
        return asyncio.run(
            _measure(server.base_url, token, server.proc.pid, day, repeat, heavy_repeat, only)
        )
    finally:
        stop_server(server)
