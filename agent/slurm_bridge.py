"""`gua-agent slurm-bridge`: on the Slurm controller, poll `squeue --json` and post the
GPU jobs' records to the board (`POST /api/v1/workspaces/{slug}/jobs`) with the
personal API token of a member with the `scheduler` role.

Every poll is read even while the board is down (a job's GPUs are only listed while it
runs); what the board has not accepted waits in the state file (agent/slurm_runs.py)
and goes out when it answers again, after a backoff. A board error or a bad squeue
output is one log line, never the end of the bridge.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from agent.client import BoardClient, Timeouts, parse_retry_after
from agent.config import TOKEN_SHAPE, ConfigError, normalize_server_url
from agent.logs import redact
from agent.slurm_runs import BridgeState, Run
from agent.slurm_squeue import MAX_OUTPUT_BYTES, SqueueError, SqueueListing, parse_squeue

log = logging.getLogger(__name__)

TOKEN_ENV = "GUA_BRIDGE_TOKEN"
DEFAULT_INTERVAL_S = 30.0
DEFAULT_FULL_EVERY_S = 3600.0
DEFAULT_BATCH = 500
MAX_BACKOFF_S = 600.0
EXIT_OK, EXIT_SQUEUE_FAILED, EXIT_PENDING = 0, 1, 75


def add_parser(sub: Any, duration: Callable[[float], Callable[[str], float]]) -> None:
    """Register `slurm-bridge` on the CLI's subparsers (`duration(min)` parses 30s, 1h)."""
    cmd = sub.add_parser("slurm-bridge", help="on the Slurm controller: post squeue's jobs")
    cmd.add_argument("--server-url", required=True, help="the board, e.g. https://board.example")
    cmd.add_argument("--workspace", required=True, help="the workspace's slug")
    cmd.add_argument(
        "--token-file",
        type=Path,
        help=f"file holding a scheduler member's API token (default: ${TOKEN_ENV})",
    )
    cmd.add_argument(
        "--state-dir",
        type=Path,
        default=_default_state_dir(),
        help="where the bridge remembers what it sent (default %(default)s)",
    )
    cmd.add_argument("--cluster", help="cluster name to send (default: squeue's ClusterName)")
    cmd.add_argument("--interval", type=duration(1.0), default=DEFAULT_INTERVAL_S)
    cmd.add_argument(
        "--full-every",
        type=duration(60.0),
        default=DEFAULT_FULL_EVERY_S,
        help="send every job again this often (default 1h)",
    )
    cmd.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, choices=range(1, 5001),
                     metavar="N", help="records per request (default 500)")  # fmt: skip
    cmd.add_argument("--squeue", default="squeue --json", help="the command (default %(default)s)")
    cmd.add_argument("--squeue-timeout", type=duration(1.0), default=120.0)
    cmd.add_argument("--connect-timeout", type=duration(0.001), default=5.0)
    cmd.add_argument("--read-timeout", type=duration(0.001), default=30.0)
    cmd.add_argument("--once", action="store_true", help="poll and post once, then exit")


def _default_state_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/gua-agent/slurm-bridge")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gua-agent" / "slurm-bridge"


def read_token(path: Path | None) -> str:
    if path is not None:
        try:
            token = path.read_text(errors="replace")[:4096].strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the token file {path}: {exc.strerror}") from None
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    redact(token)
    if not token or TOKEN_SHAPE.fullmatch(token) is None:
        where = str(path) if path is not None else f"${TOKEN_ENV}"
        raise ConfigError(f"no usable API token in {where} (--token-file or ${TOKEN_ENV})")
    return token


def run_squeue(argv: Sequence[str], timeout: float) -> SqueueListing:
    """Run squeue; its output is read up to MAX_OUTPUT_BYTES and then refused."""
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            raise SqueueError(f"cannot run {argv[0]}: {exc.strerror}") from None
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            out = _read_bounded(proc)
            code = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if out is None:
            raise SqueueError(f"squeue's output is over {MAX_OUTPUT_BYTES // 2**20} MiB; refused")
        if code != 0:
            err.seek(0)
            first = err.read(2000).decode(errors="replace").strip().splitlines()
            why = "killed after the timeout" if code < 0 else f"exited {code}"
            raise SqueueError(f"squeue {why}: {first[0] if first else 'no message'}")
    return parse_squeue(out)


def _read_bounded(proc: subprocess.Popen[bytes]) -> bytes | None:
    assert proc.stdout is not None
    buffer = bytearray()
    while chunk := os.read(proc.stdout.fileno(), 1 << 20):
        buffer += chunk
        if len(buffer) > MAX_OUTPUT_BYTES:
            proc.kill()
            return None
    return bytes(buffer)


@dataclass(frozen=True, slots=True)
class PostResult:
    kind: str  # accepted, rejected (4xx: the records are bad), refused (401/403), retry
    status: int | None
    message: str
    retry_after: float | None = None
    unmatched: tuple[str, ...] = ()


class JobsClient(BoardClient):
    """The board client, posting job records with a personal API token."""

    def __init__(self, server_url: str, token: str, slug: str, timeouts: Timeouts) -> None:
        super().__init__(server_url, agent_token=token, timeouts=timeouts)
        self.url = f"{self.server_url}/api/v1/workspaces/{quote(slug, safe='')}/jobs"

    def post_job_records(self, records: Sequence[dict[str, Any]]) -> PostResult:
        body = json.dumps({"jobs": list(records)}, separators=(",", ":")).encode()
        try:
            reply = self._exchange(self.url, body, self.timeouts.bounded(None), None)
        except httpx.HTTPError as exc:
            return PostResult("retry", None, f"{type(exc).__name__}: {str(exc)[:200]}")
        status = reply.status
        data = _json(reply.body)
        detail = data.get("detail") if data else None
        text = f"HTTP {status}" + (f": {_clean(detail)}" if isinstance(detail, str) else "")
        if reply.is_success:
            hosts = data.get("unmatchedHosts") if data else None
            unmatched = (
                tuple(_clean(h)[:128] for h in hosts[:50] if isinstance(h, str))
                if isinstance(hosts, list)
                else ()
            )
            return PostResult("accepted", status, text, unmatched=unmatched)
        if status in (401, 403):
            return PostResult("refused", status, text)
        if status in (408, 429) or status >= 500 or status < 400:
            return PostResult(
                "retry", status, text, parse_retry_after(reply.headers.get("Retry-After"))
            )
        return PostResult("rejected", status, text)


def _json(body: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _clean(text: str) -> str:
    return "".join(ch if ch.isprintable() else " " for ch in text[:500]).strip()


class Bridge:
    """Poll, remember, post. `clock` gives Unix seconds (tests pass their own)."""

    def __init__(
        self,
        client: JobsClient,
        state: BridgeState,
        squeue: Callable[[], SqueueListing],
        *,
        batch_size: int = DEFAULT_BATCH,
        full_every: float = DEFAULT_FULL_EVERY_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client, self.state, self.squeue = client, state, squeue
        self.batch_size, self.full_every, self.clock = batch_size, int(full_every), clock
        self.failures = 0
        self.next_post_at = 0.0
        self.unmatched: tuple[str, ...] = ()
        self.stop = threading.Event()

    def poll(self) -> bool:
        """Read squeue once into the state; False (logged) when it could not be read."""
        now = int(self.clock())
        try:
            listing = self.squeue()
        except SqueueError as exc:
            log.error("slurm-bridge: %s; the jobs stay as they were", exc)
            return False
        if listing.errors:
            log.warning("squeue reported: %s", "; ".join(listing.errors))
        if listing.skipped:
            log.warning(
                "squeue listed %d entries that are not readable jobs; passed over", listing.skipped
            )
        self.state.observe(listing, now)
        if self.state.skipped_no_cluster:
            log.warning(
                "%d job(s) without a cluster name passed over: set --cluster",
                self.state.skipped_no_cluster,
            )
            self.state.skipped_no_cluster = 0
        self._save()
        return True

    def post(self, *, force: bool = False) -> int:
        """Send what the board lacks (after the backoff unless `force`); how many owed
        records are left."""
        if not force and self.clock() < self.next_post_at:
            return len([r for r in self.state.runs.values() if r.owed])
        owed = self.state.owed(int(self.clock()), self.full_every)
        left = self._send(owed)
        self._save()
        return left

    def _send(self, runs: list[Run]) -> int:
        batches = [runs[i : i + self.batch_size] for i in range(0, len(runs), self.batch_size)]
        while batches:
            batch = batches.pop(0)
            result = self.client.post_job_records([r.record for r in batch])
            if result.kind == "accepted":
                self.state.mark_sent(batch)
                self.failures = 0
                if result.unmatched and result.unmatched != self.unmatched:
                    log.warning("the board knows no host named %s", ", ".join(result.unmatched))
                self.unmatched = result.unmatched or self.unmatched
            elif result.kind == "rejected" and len(batch) > 1:
                half = len(batch) // 2
                batches[:0] = [batch[:half], batch[half:]]  # find the record it refuses
            elif result.kind == "rejected":
                record = batch[0].record
                log.error(
                    "the board refused job %s of %s (%s); not sent again",
                    record["jobId"],
                    record["cluster"],
                    result.message,
                )
                self.state.mark_sent(batch)
            else:
                self._back_off(result)
                return sum(len(b) for b in batches) + len(batch)
        return 0

    def _back_off(self, result: PostResult) -> None:
        self.failures += 1
        wait = min(MAX_BACKOFF_S, 5.0 * 2 ** min(self.failures - 1, 10))
        if result.retry_after is not None:
            wait = max(wait, result.retry_after)
        self.next_post_at = self.clock() + wait
        what = (
            "refused the token (is it a scheduler member's, unrevoked?)"
            if result.kind == "refused"
            else "did not take the jobs"
        )
        log.error("the board %s: %s; retrying in %.0f s", what, result.message, wait)

    def _save(self) -> None:
        try:
            self.state.save()
        except OSError as exc:
            log.error("cannot write the state file %s: %s", self.state.path, exc)

    def run(self, interval: float) -> None:
        while not self.stop.is_set():
            began = time.monotonic()
            self.poll()
            self.post()
            self.stop.wait(max(0.0, interval - (time.monotonic() - began)))


@contextmanager
def _stopped_by_signals(bridge: Bridge) -> Iterator[None]:
    def handler(_signum: int, _frame: object) -> None:
        bridge.stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def cmd_slurm_bridge(args: argparse.Namespace) -> int:
    token = read_token(args.token_file)
    server_url = normalize_server_url(args.server_url)
    argv = shlex.split(args.squeue)
    if not argv:
        raise ConfigError("--squeue is empty")
    state = BridgeState(args.state_dir, cluster=args.cluster)
    state.load()
    timeouts = Timeouts(connect=args.connect_timeout, read=args.read_timeout)
    client = JobsClient(server_url, token, args.workspace, timeouts)
    try:
        bridge = Bridge(
            client,
            state,
            lambda: run_squeue(argv, args.squeue_timeout),
            batch_size=args.batch_size,
            full_every=args.full_every,
        )
        if args.once:
            polled = bridge.poll()
            left = bridge.post(force=True)
            if not polled:
                return EXIT_SQUEUE_FAILED
            return EXIT_PENDING if left else EXIT_OK
        log.info(
            "slurm-bridge: %s every %.0f s to %s, workspace %s; state in %s",
            args.squeue, args.interval, server_url, args.workspace, args.state_dir,
        )  # fmt: skip
        with _stopped_by_signals(bridge):
            bridge.run(args.interval)
    finally:
        client.close()
    return EXIT_OK
