"""The live fleet end to end: agents on the WebSocket at 1 Hz, viewers of the fleet's frames.

    PYTHONPATH=. .venv/bin/python bench/live_fleet.py --hosts 1000 --viewers 100 --seconds 60
    PYTHONPATH=. .venv/bin/python bench/live_fleet.py --path events --hosts 250 --viewers 50

1. a scratch database, migrated; a workspace, its admin's API token (the viewers' too);
2. `gua-board serve --workers 2` on a free loopback port (the code under test: run with
   PYTHONPATH=<other checkout> to measure another revision);
3. --hosts hosts enrolled through the API; one process (asyncio) holds their WebSockets
   (`/agent/v1/stream`) and sends each host's 8-GPU `util` message once a second, spread
   over the second, `ts` the sending time (as agents 1.6+ do);
4. another process holds --viewers Server-Sent Events streams: the fleet's frames
   (`--path fleet`, GET …/stream/fleet) or every sample as its own event (`--path events`,
   GET …/stream, the per-event path the fleet's frames replace). Every viewer reads all
   it is sent; --measure of them (spread over the connections) also parse it and note
   when each host's newest sample time changed;
5. after --warmup seconds, --seconds of measurement, then 3 s for the last frames.

Prints the update latency (frame arrival minus the agent's sample time; a sample counts
as shown once a frame carrying it or a later sample of its host arrived) p50/p95/p99 and
the share within 1 s, the share of samples shown, the board's CPU (its process tree, in
cores), its RSS at the start and the end of the measurement (every --rss-every seconds
with that flag), PostgreSQL's backends' CPU, bytes per viewer per second, keyframes sent
to lagging viewers, and the load generator's own CPU. Agents, viewers, the board and
PostgreSQL share this machine's cores: the figures are what one machine does with all four.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import multiprocessing as mp
import os
import resource
import secrets
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    backend_pids,
    cpu_delta,
    cpu_seconds,
    free_port,
    machine_busy_seconds,
    process_tree,
    scratch_database,
    start_server,
    stop_server,
    venv_script,
    wait_healthy,
)

WORKSPACE = "bench"
GPUS = 8
GRACE_SECONDS = 3.0  # viewers read this long after the agents' last sample
SHOWN_TOLERANCE = 0.0005  # frames carry times to the millisecond


# --- setup ------------------------------------------------------------------------------


async def prepare(url: str) -> str:
    """The workspace and its admin's API token."""
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
                session, workspace, "admin@bench.example", "admin", None
            )
            await session.commit()
            return admin.api_token
    finally:
        await engine.dispose()


async def enroll(base: str, admin_token: str, hosts: int) -> list[tuple[str, str]]:
    """(agent token, hostId) of each enrolled host, by number."""
    admin = {"Authorization": f"Bearer {admin_token}"}
    gate = asyncio.Semaphore(8)
    out: list[tuple[str, str]] = [("", "")] * hosts
    async with httpx.AsyncClient(base_url=base, timeout=60.0, trust_env=False) as client:

        async def one(i: int) -> None:
            async with gate:
                issued = await client.post(
                    f"/api/v1/workspaces/{WORKSPACE}/enrollment-tokens",
                    json={"displayName": f"gpu-{i:04d}"},
                    headers=admin,
                )
                claimed = await client.post(
                    "/agent/v1/enrollments/claim",
                    json={"enrollmentToken": issued.json()["enrollmentToken"]},
                )
                body = claimed.json()
                out[i] = (body["agentToken"], body["hostId"])

        await asyncio.gather(*(one(i) for i in range(hosts)))
    return out


# --- the agents (a process of their own) ------------------------------------------------


def util_message(i: int, k: int, ts: float) -> str:
    return json.dumps(
        {
            "type": "util",
            "ts": ts,
            "gpus": [
                {
                    "deviceUuid": f"GPU-{i:05d}-{g}-0000-0000-000000000000",
                    "utilPct": (i * 7 + k * 3 + g * 11) % 101,
                    "memUsedMb": 1000 * g + k % 1000,
                }
                for g in range(GPUS)
            ],
        },
        separators=(",", ":"),
    )


def agents_main(control: Connection, base: str, tokens: list[str]) -> None:
    asyncio.run(_agents(control, base, tokens))


async def _agents(control: Connection, base: str, tokens: list[str]) -> None:
    from websockets.asyncio.client import connect

    url = base.replace("http://", "ws://") + "/agent/v1/stream"
    gate = asyncio.Semaphore(50)
    sockets: list[Any] = [None] * len(tokens)

    async def open_one(i: int) -> None:
        async with gate:
            sockets[i] = await connect(
                url,
                additional_headers={"Authorization": f"Bearer {tokens[i]}"},
                proxy=None,
                open_timeout=60,
                compression=None,  # agents send small frames uncompressed
            )

    await asyncio.gather(*(open_one(i) for i in range(len(tokens))))
    loop = asyncio.get_running_loop()
    control.send(("ready", len(tokens)))
    t_go, t_end = await loop.run_in_executor(None, control.recv)
    sent = [array("d") for _ in tokens]
    errors: list[str] = []

    async def agent(i: int) -> None:
        ws = sockets[i]
        first = t_go + i / len(tokens)  # spread over the second, as real agents are
        k = 0
        while (at := first + k) < t_end:
            await asyncio.sleep(max(0.0, at - time.time()))
            ts = round(time.time(), 3)  # the agent's precision (agent/stream.py)
            try:
                await ws.send(util_message(i, k, ts))
            except Exception as exc:
                errors.append(f"host {i}: {exc!r}")
                return
            sent[i].append(ts)
            k += 1

    await asyncio.gather(*(agent(i) for i in range(len(tokens))))
    for ws in sockets:
        with contextlib.suppress(Exception):
            await ws.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    control.send(("done", sent, usage.ru_utime + usage.ru_stime, errors[:5], len(errors)))


# --- the viewers (a process of their own) -----------------------------------------------


@dataclass
class Viewer:
    measured: bool
    received: int = 0  # bytes
    frames: int = 0
    keyframes: int = 0
    error: str = ""
    table: dict[int, str] = field(default_factory=dict)
    newest: dict[str, float] = field(default_factory=dict)
    # hostId -> (sample times shown, in order; when each first arrived)
    shown: dict[str, tuple[array[float], array[float]]] = field(default_factory=dict)

    def note(self, host: str, ts: float, arrived: float) -> None:
        if ts <= self.newest.get(host, 0.0):
            return
        self.newest[host] = ts
        times = self.shown.get(host)
        if times is None:
            times = self.shown[host] = (array("d"), array("d"))
        times[0].append(ts)
        times[1].append(arrived)

    def frame(self, data: bytes, arrived: float) -> None:
        frame = json.loads(data)
        if frame["key"]:
            self.table = {}
        for index, host, _ in frame["hosts"]:
            self.table[index] = host
        t = frame["t"]
        for index, age_ms, _, _ in frame["rows"]:
            self.note(self.table[index], t - age_ms / 1000, arrived)

    def event(self, data: bytes, arrived: float) -> None:
        sample = json.loads(data)
        self.note(sample["hostId"], sample["ts"], arrived)


async def _open_stream(
    host: str, port: int, path: str, token: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The stream's body, past the headers (keep the writer: dropped, it closes the socket)."""
    reader, writer = await asyncio.open_connection(host, port, limit=2**24)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"{path}: {status.decode(errors='replace').strip()}")
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    return reader, writer


async def _read(
    viewer: Viewer, stream: tuple[asyncio.StreamReader, asyncio.StreamWriter], until: float
) -> None:
    """Reads a chunked SSE body (one chunk per event, as uvicorn sends them) until `until`."""
    reader, writer = stream
    pending = b""
    try:
        while time.time() < until:
            async with asyncio.timeout(max(0.1, until - time.time())):
                line = await reader.readline()
                size = int(line.strip() or b"0", 16)
                if size == 0:
                    viewer.error = f"the stream ended ({line!r})"
                    return
                chunk = (await reader.readexactly(size + 2))[:-2]
            arrived = time.time()
            viewer.received += size
            pending += chunk
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                if not event.startswith(b"event: "):
                    continue  # a keepalive comment
                name, _, data = event.partition(b"\ndata: ")
                if name == b"event: frame":
                    viewer.frames += 1
                    if data.startswith(b'{"seq":') and b'"key":true' in data[:40]:
                        viewer.keyframes += 1
                    if viewer.measured:
                        viewer.frame(data, arrived)
                elif name == b"event: util":
                    viewer.frames += 1
                    if viewer.measured:
                        viewer.event(data, arrived)
    except TimeoutError:
        pass
    except Exception as exc:
        viewer.error = repr(exc)
    finally:
        writer.close()


def viewers_main(
    control: Connection, base: str, path: str, token: str, count: int, measure: int
) -> None:
    asyncio.run(_viewers(control, base, path, token, count, measure))


async def _viewers(
    control: Connection, base: str, path: str, token: str, count: int, measure: int
) -> None:
    host, port = base.removeprefix("http://").split(":")
    step = max(1, count // max(1, measure))
    viewers = [Viewer(measured=(j % step == 0 and j // step < measure)) for j in range(count)]
    gate = asyncio.Semaphore(20)

    async def open_one(j: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        async with gate:
            return await _open_stream(host, int(port), path, token)

    readers = await asyncio.gather(*(open_one(j) for j in range(count)))
    loop = asyncio.get_running_loop()
    control.send(("ready", count))
    until = await loop.run_in_executor(None, control.recv)
    await asyncio.gather(*(_read(v, r, until) for v, r in zip(viewers, readers, strict=True)))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    control.send(
        (
            "done",
            [(v.measured, v.received, v.frames, v.keyframes, v.error) for v in viewers],
            [v.shown for v in viewers if v.measured],
            usage.ru_utime + usage.ru_stime,
        )
    )


# --- measuring --------------------------------------------------------------------------


def tree_rss(pid: int) -> int:
    total = 0
    for p in process_tree(pid):
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def latencies(
    sent: list[array[float]],
    host_ids: list[str],
    shown: list[dict[str, tuple[array[float], array[float]]]],
    window: tuple[float, float],
) -> tuple[list[float], int]:
    """Each measured viewer's latency of each sample sent in the window, and how many
    samples in all (viewers x samples) it should have shown."""
    out: list[float] = []
    expected = 0
    for seen in shown:
        for i, times in enumerate(sent):
            wanted = [ts for ts in times if window[0] <= ts <= window[1]]
            expected += len(wanted)
            got = seen.get(host_ids[i])
            if got is None:
                continue
            shown_ts, arrived = got
            for ts in wanted:
                k = bisect.bisect_left(shown_ts, ts - SHOWN_TOLERANCE)
                if k < len(shown_ts):
                    out.append(arrived[k] - ts)
    return out, expected


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def run(args: argparse.Namespace) -> None:
    from board.db.migrate import upgrade

    log_dir = Path(tempfile.mkdtemp(prefix="gua-bench-live-"))
    with scratch_database("gua_bench_live") as url:
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
        spawn = mp.get_context("spawn")
        children: list[Any] = []
        try:
            wait_healthy(server)
            t0 = time.monotonic()
            enrolled = asyncio.run(enroll(server.base_url, admin_token, args.hosts))
            tokens = [t for t, _ in enrolled]
            host_ids = [h for _, h in enrolled]
            print(f"enrolled {args.hosts} hosts in {time.monotonic() - t0:.1f}s", file=sys.stderr)
            path = f"/api/v1/workspaces/{WORKSPACE}/stream" + (
                "/fleet" if args.path == "fleet" else ""
            )
            measure = min(args.viewers, args.measure)
            to_viewers, viewers_end = spawn.Pipe()
            viewers = spawn.Process(
                target=viewers_main,
                args=(viewers_end, server.base_url, path, admin_token, args.viewers, measure),
            )
            viewers.start()
            children.append(viewers)
            assert to_viewers.poll(120), "the viewers did not connect"
            assert to_viewers.recv()[0] == "ready"
            to_agents, agents_end = spawn.Pipe()
            agents = spawn.Process(target=agents_main, args=(agents_end, server.base_url, tokens))
            agents.start()
            children.append(agents)
            assert to_agents.poll(300), "the agents did not connect"
            assert to_agents.recv()[0] == "ready"
            t_go = time.time() + 1.0
            t_warm = t_go + args.warmup
            t_end = t_warm + args.seconds
            to_agents.send((t_go, t_end))
            to_viewers.send(t_end + GRACE_SECONDS)

            time.sleep(max(0.0, t_warm - time.time()))
            tree = {p.pid: p for p in process_tree(server.proc.pid)}
            pg = {pid: psutil.Process(pid) for pid in backend_pids(url)}
            cpu0, pg0, busy0 = cpu_seconds(tree), cpu_seconds(pg), machine_busy_seconds()
            rss = [(0.0, tree_rss(server.proc.pid))]
            while (left := t_end - time.time()) > 0:
                time.sleep(min(left, args.rss_every or left))
                rss.append((time.time() - t_warm, tree_rss(server.proc.pid)))
            cpu1, pg1, busy1 = cpu_seconds(tree), cpu_seconds(pg), machine_busy_seconds()
            seconds = args.seconds

            agents_done = to_agents.recv()
            viewers_done = to_viewers.recv()
        finally:
            for child in children:
                child.join(30)
                if child.is_alive():
                    child.kill()
            stop_server(server)
    _, sent, agents_cpu, agent_errors, agent_error_count = agents_done
    _, per_viewer, shown, viewers_cpu = viewers_done
    lat, expected = latencies(sent, host_ids, shown, (t_warm, t_end))
    errors = [e for *_, e in per_viewer if e]
    total_bytes = sum(b for _, b, *_ in per_viewer)
    keyframes = sum(k for *_, k, _ in per_viewer)
    frames = sum(f for _, _, f, _, _ in per_viewer)
    span = t_end + GRACE_SECONDS - t_go
    print(
        f"\n{args.path} path: {args.hosts} hosts x {GPUS} GPUs at 1 Hz, {args.viewers} viewers "
        f"({measure} measured), {seconds} s after {args.warmup} s warm-up, "
        f"`serve --workers 2`, {os.cpu_count()} cores shared by everything"
    )
    print(
        f"update latency: p50 {pct(lat, 0.5):.3f} s, p95 {pct(lat, 0.95):.3f} s, "
        f"p99 {pct(lat, 0.99):.3f} s; within 1 s: "
        f"{sum(v <= 1.0 for v in lat) / max(1, expected):.1%} of samples"
    )
    print(f"samples shown: {len(lat) / max(1, expected):.2%} ({len(lat)} of {expected})")
    print(
        f"board CPU: {cpu_delta(cpu0, cpu1) / seconds:.2f} cores; PostgreSQL backends "
        f"{cpu_delta(pg0, pg1) / seconds:.2f}; whole machine busy "
        f"{(busy1 - busy0) / seconds:.2f} of {os.cpu_count()}"
    )
    print(
        f"board RSS: {rss[0][1] / 2**20:.0f} MiB at the start, {rss[-1][1] / 2**20:.0f} MiB "
        f"at the end"
        + (
            " (" + ", ".join(f"{t:.0f}s {r / 2**20:.0f}" for t, r in rss) + " MiB)"
            if args.rss_every
            else ""
        )
    )
    print(
        f"per viewer: {total_bytes / args.viewers / span / 1024:.1f} KiB/s, "
        f"{frames / args.viewers / span:.1f} events/s; keyframes {keyframes} in all"
    )
    print(
        f"load generator CPU: agents {agents_cpu / span:.2f} cores, viewers "
        f"{viewers_cpu / span:.2f} cores (whole run)"
    )
    if errors or agent_error_count:
        print(
            f"errors: viewers {errors[:3]} ({len(errors)}); agents {agent_errors} "
            f"({agent_error_count})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=250)
    parser.add_argument("--viewers", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--path", choices=("fleet", "events"), default="fleet")
    parser.add_argument("--measure", type=int, default=20, help="viewers that parse frames")
    parser.add_argument("--rss-every", type=float, default=0.0, help="seconds; 0: start, end")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
