"""The soak: a lab's hosts pushing at the agent's 30 s tick for half an hour, with the
notices worker, maintenance and report readers running beside them (issue 33).

    .venv/bin/python bench/soak.py [--hosts 250] [--minutes 30] [--speedup 1] [--readers 5]

1. a scratch database, migrated; a workspace with an admin (a personal API token);
2. `gua-board serve --workers 2` on a free loopback port, with maintenance every 10 s
   (the hourly schedule, shortened so that it runs tens of times), notices detected every
   5 s and delivered to a webhook channel on a receiver in this process, idle-held
   notices after 5 minutes;
3. --hosts hosts enrolled through the API, then each pushes an 8-GPU, 16-process
   snapshot every 30 s of its own clock for --minutes, spread evenly over the tick. With
   --speedup N the wall clock runs N times faster than the agents' (a push every 30/N s;
   observedAt still steps 30 s, ending near now), so --minutes 30 --speedup 10 is three
   minutes of wall time carrying the same rows. Every host's idle-held card changes hands
   every 10 simulated minutes, so notice episodes open and resolve all along;
4. --readers readers fetch reports in turn (usage by person for the month, usage by GPU
   and day, utilization per GPU and hour for the last day, the FOCUS export for the month,
   the hosts list), one request a second each. A workspace runs at most three reports at
   once (board/reportkit/slots.py); a read answered 429 waits its Retry-After, as a client
   should, and is counted apart from errors.

Prints push latency (p50/p95/p99/max), errors of every kind (non-202 pushes, failed
reads, error lines in the board's log), the board's memory (its process tree's RSS)
after the warm-up, at the end and its slope, its CPU, and the webhooks received. Exits 1
when a goal is missed: any error, push p99 >= 250 ms, or memory grown by more than
max(5 %, 16 MiB) from the first tenth after the warm-up to the last tenth.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    cpu_delta,
    free_port,
    process_tree,
    scratch_database,
    start_server,
    stop_server,
    venv_script,
    wait_healthy,
)
from ingest import WORKSPACE, RawConnection, enroll_hosts, prepare_database, snapshot  # noqa: E402

TICK_SECONDS = 30.0
FLIP_TICKS = 20  # an idle-held card changes hands every 10 simulated minutes
GOAL_P99_MS = 250.0
MEMORY_SLACK = (0.05, 16 * 2**20)


def bodies_of(hostname: str) -> tuple[tuple[bytes, bytes], tuple[bytes, bytes]]:
    """Two shapes of one host's snapshot around observedAt: as bench/ingest.py sends it,
    and with its idle-held cards (bob's jupyter) turned active under carol."""
    plain = snapshot(hostname)
    flipped = snapshot(hostname)
    for gpu in flipped["gpus"]:
        if gpu["usageState"] == "idle_held":
            gpu["usageState"], gpu["utilPct"] = "active", 90
            for process in gpu["processes"]:
                process["linuxUser"], process["name"] = "carol", "train.py"
    out = []
    for shape in (plain, flipped):
        head, tail = json.dumps(shape).encode().split(b"@OBSERVED_AT@")
        out.append((head, tail))
    return out[0], out[1]


@dataclass
class Tally:
    push_ms: list[float] = field(default_factory=list)
    push_errors: dict[str, int] = field(default_factory=dict)
    read_ms: dict[str, list[float]] = field(default_factory=dict)
    read_errors: dict[str, int] = field(default_factory=dict)
    webhooks: int = 0
    busy: int = 0  # reads answered 429 (the workspace's report slots all taken)

    def error(self, book: dict[str, int], what: str) -> None:
        book[what] = book.get(what, 0) + 1


class MemoryTimeline:
    """The board's process tree RSS every `interval` seconds, from a thread."""

    def __init__(self, pid: int, interval: float = 2.0) -> None:
        self.pid, self.interval = pid, interval
        self.points: list[tuple[float, int]] = []
        self.seen: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        total = 0
        for p in process_tree(self.pid):
            self.seen.setdefault(p.pid, p)
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        self.points.append((time.monotonic(), total))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def cpu(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for pid, p in self.seen.items():
            try:
                t = p.cpu_times()
                out[pid] = t.user + t.system
            except psutil.Error:
                pass
        return out


async def webhook_receiver(tally: Tally) -> tuple[asyncio.Server, int]:
    """A real HTTP receiver: reads each request whole, answers 204, counts it."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                tally.webhooks += 1
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1])


async def configure(base_url: str, token: str, receiver_port: int) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0, headers=auth) as client:
        settings = await client.patch(
            f"/api/v1/workspaces/{WORKSPACE}/settings", json={"idleHeldNoticeMinutes": 5}
        )
        channel = await client.post(
            f"/api/v1/workspaces/{WORKSPACE}/notification-channels",
            json={"kind": "webhook", "url": f"http://127.0.0.1:{receiver_port}/hook"},
        )
        for what, response in (("settings", settings), ("channel", channel)):
            if response.status_code >= 300:
                raise RuntimeError(f"{what}: {response.status_code} {response.text}")


def read_paths(now: datetime) -> list[tuple[str, str]]:
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    next_month = (month + timedelta(days=32)).replace(day=1)
    day_ago = (now - timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    span = f"from={month:%Y-%m-%d}&to={next_month:%Y-%m-%d}"
    base = f"/api/v1/workspaces/{WORKSPACE}"
    hour = f"from={day_ago:%Y-%m-%dT%H:00:00Z}&to={now + timedelta(hours=1):%Y-%m-%dT%H:00:00Z}"
    return [
        ("usage by user", f"{base}/reports/usage?{span}&groupBy=user"),
        ("usage by gpu, day", f"{base}/reports/usage?{span}&groupBy=gpu,day"),
        ("utilization", f"{base}/reports/utilization?{hour}&groupBy=gpu&bucket=hour"),
        ("focus", f"{base}/reports/focus?{span}"),
        ("hosts", f"{base}/hosts"),
    ]


async def reader(
    base_url: str, token: str, index: int, until: float, tally: Tally, paths: list[tuple[str, str]]
) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    turn = index
    async with httpx.AsyncClient(base_url=base_url, timeout=60.0, headers=auth) as client:
        while time.monotonic() < until:
            name, path = paths[turn % len(paths)]
            turn += 1
            t = time.perf_counter()
            try:
                response = await client.get(path)
                await response.aread()
                if response.status_code == 429:
                    # By design: REPORT_SLOTS reports of a workspace run at once; a
                    # client waits as Retry-After says (counted, not an error).
                    tally.busy += 1
                    await asyncio.sleep(float(response.headers.get("retry-after", "10")))
                    continue
                ok = response.status_code == 200
                what = f"{name}: HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                ok, what = False, f"{name}: {type(exc).__name__}"
            if ok:
                tally.read_ms.setdefault(name, []).append((time.perf_counter() - t) * 1e3)
            else:
                tally.error(tally.read_errors, what)
            await asyncio.sleep(1.0)


async def host_loop(
    base_url: str,
    token: str,
    shapes: tuple[tuple[bytes, bytes], tuple[bytes, bytes]],
    offset: float,
    ticks: int,
    period: float,
    t0: float,
    sim_start: datetime,
    tally: Tally,
) -> None:
    host, port = base_url.removeprefix("http://").split(":")
    conn = RawConnection(host, int(port))
    try:
        for k in range(ticks):
            due = t0 + offset * period + k * period
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            head, tail = shapes[(k // FLIP_TICKS) % 2]
            stamp = (sim_start + timedelta(seconds=TICK_SECONDS * (k + offset))).isoformat()
            body = head + stamp.encode() + tail
            t = time.perf_counter()
            try:
                try:
                    status, _ = await conn.post("/agent/v1/observations", token, body)
                except (OSError, asyncio.IncompleteReadError):
                    # The board closes a connection idle past its keep-alive timeout
                    # (shorter than the 30 s tick); an HTTP client finds it closed and
                    # sends on a new one, as this does, once.
                    status, _ = await conn.post("/agent/v1/observations", token, body)
            except (OSError, asyncio.IncompleteReadError) as exc:
                tally.error(tally.push_errors, type(exc).__name__)
                continue
            if status == 202:
                tally.push_ms.append((time.perf_counter() - t) * 1e3)
            else:
                tally.error(tally.push_errors, f"HTTP {status}")
    finally:
        await conn.close()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def log_errors(path: Path) -> list[str]:
    lines = []
    for line in path.read_text(errors="replace").splitlines():
        lowered = line.lower()
        if '"level": "error"' in lowered or "traceback" in lowered or '"level":"error"' in lowered:
            lines.append(line[:300])
    return lines


async def soak(args: argparse.Namespace, base_url: str, token: str, agents: list[Any]) -> Tally:
    tally = Tally()
    server, receiver_port = await webhook_receiver(tally)
    await configure(base_url, token, receiver_port)
    period = TICK_SECONDS / args.speedup
    ticks = int(args.minutes * 60 / TICK_SECONDS)
    now = datetime.now(UTC)
    sim_start = now - timedelta(minutes=args.minutes + 1)
    t0 = time.monotonic() + 1.0
    until = t0 + ticks * period
    paths = read_paths(now)
    tasks = [
        host_loop(
            base_url,
            a.token,
            bodies_of(f"bench-{i:04d}"),
            i / len(agents),
            ticks,
            period,
            t0,
            sim_start,
            tally,
        )  # fmt: skip
        for i, a in enumerate(agents)
    ]
    tasks += [reader(base_url, token, r, until, tally, paths) for r in range(args.readers)]
    await asyncio.gather(*tasks)
    # The last episodes' notices: give the worker a few detection passes to send them.
    await asyncio.sleep(min(15.0, 3 * period))
    server.close()
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=250)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--speedup", type=float, default=1.0)
    parser.add_argument("--readers", type=int, default=5)
    args = parser.parse_args(argv)

    with scratch_database("gua_bench_soak") as url, tempfile.TemporaryDirectory() as tmp:
        from board.db.migrate import upgrade

        upgrade(url)
        token = asyncio.run(prepare_database(url))
        port = free_port()
        env = {
            **os.environ,
            "GUA_BOARD_DATABASE_URL": url,
            "GUA_BOARD_DATA_DIR": str(Path(tmp) / "data"),
            "GUA_BOARD_SECRET_KEY": secrets.token_urlsafe(48),
            "GUA_BOARD_LOG_LEVEL": "warning",
            "GUA_BOARD_MAINTENANCE_INTERVAL_SECONDS": "10",
            "GUA_BOARD_NOTICES_DETECT_SECONDS": "5",
            "GUA_BOARD_ALLOW_INSECURE_WEBHOOKS": "true",
        }
        argv_ = [venv_script("gua-board"), "serve", "--workers", "2", "--port", str(port)]
        board = start_server("board", argv_, env, port, Path(tmp))
        try:
            wait_healthy(board)
            agents = asyncio.run(enroll_hosts(board.base_url, token, args.hosts))
            memory = MemoryTimeline(board.proc.pid)
            memory.start()
            cpu0, wall0 = memory.cpu(), time.monotonic()
            tally = asyncio.run(soak(args, board.base_url, token, agents))
            cpu1, wall1 = memory.cpu(), time.monotonic()
            memory.stop()
            alive = board.proc.poll() is None
            errors_in_log = log_errors(board.log_path)
        finally:
            stop_server(board)
    cores = cpu_delta(cpu0, cpu1) / (wall1 - wall0)
    return report(args, tally, memory, cores, alive, errors_in_log)


def report(
    args: argparse.Namespace,
    tally: Tally,
    memory: MemoryTimeline,
    cores: float,
    alive: bool,
    errors_in_log: list[str],
) -> int:
    pushes = tally.push_ms
    print(f"machine: {psutil.cpu_count()} CPUs; {args.hosts} hosts, {args.minutes:g} simulated")
    print(f"minutes at {args.speedup:g}x ({len(pushes)} pushes), {args.readers} readers")
    p50, p95, p99 = (percentile(pushes, q) for q in (0.50, 0.95, 0.99))
    print(
        f"push latency ms: p50 {p50:.1f}  p95 {p95:.1f}  p99 {p99:.1f}  "
        f"max {max(pushes, default=float('nan')):.1f}   (goal p99 < {GOAL_P99_MS:.0f})"
    )
    for name, values in tally.read_ms.items():
        print(
            f"read {name:<18} n={len(values):4d}  p50 {statistics.median(values):7.1f} ms"
            f"  p95 {percentile(values, 0.95):7.1f} ms"
        )
    # Memory: skip the first fifth (imports, pools, caches filling), then compare the
    # first tenth of what remains with the last tenth.
    points = memory.points[len(memory.points) // 5 :]
    tenth = max(1, len(points) // 10)
    first = statistics.median(rss for _, rss in points[:tenth])
    last = statistics.median(rss for _, rss in points[-tenth:])
    span_min = (points[-1][0] - points[0][0]) / 60 if len(points) > 1 else 0.0
    grown = last - first
    print(
        f"board RSS (process tree): {first / 2**20:.0f} MiB after warm-up, "
        f"{last / 2**20:.0f} MiB at the end ({grown / 2**20:+.1f} MiB over {span_min:.1f} min), "
        f"peak {max(r for _, r in memory.points) / 2**20:.0f} MiB"
    )
    print(f"board CPU: {cores:.2f} cores on average; webhooks received: {tally.webhooks}")
    print(f"reads answered 429 and retried after Retry-After: {tally.busy}")
    print(f"errors: pushes {tally.push_errors or 0}, reads {tally.read_errors or 0}, "
          f"log lines {len(errors_in_log)}, board alive: {alive}")  # fmt: skip
    for line in errors_in_log[:5]:
        print("  log:", line)
    missed = []
    if tally.push_errors or tally.read_errors or errors_in_log or not alive:
        missed.append("errors")
    if not p99 < GOAL_P99_MS:
        missed.append("push p99")
    if grown > max(MEMORY_SLACK[0] * first, MEMORY_SLACK[1]):
        missed.append("memory growth")
    if tally.webhooks == 0:
        missed.append("no notice delivered")
    print("goals:", "met" if not missed else "MISSED: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
