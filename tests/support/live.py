"""The live board: `gua-board serve` as a real process on a loopback port, against a
database of the test's (a clone of the migrated template), and how tests talk to it.

One harness for every suite that needs real processes (security, operations, interop,
the OpenAPI fuzzing, the live stream across processes). `start_board` takes the board's
settings as environment variables, the number of workers, and optionally the address,
the port and the secret key; it waits (a generous deadline) for /healthz and, with more
than one worker, for every worker to be up.

Every answer read through `LiveBoard.call` is capped in bytes (an SSE stream or a runaway
report must not hang a test), checked for token secrets the board handed out before (a
secret is shown once, by the answer that issues it, never again), and can name the worker
process that served it: the board's socket of the connection is looked up in /proc, so
"in every worker" is something a test can check rather than hope for.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.ports import free_port
from tests.support.processes import children, memory_kib, reset_peak, socket_inodes
from tests.support.replies import SECRET, Reply, csrf_of

BIN = Path(sys.executable).parent
TIMEOUT = httpx.Timeout(120.0, connect=30.0)
START_SECONDS = 180.0


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without proxies, without any GUA_BOARD_ setting and
    without a metrics directory of its own; then `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if "proxy" not in k.lower()
        and not k.startswith(("GUA_BOARD_", "FORWARDED_ALLOW_IPS"))
        and k not in ("PROMETHEUS_MULTIPROC_DIR", "PROMETHEUS_MULTIPROCESS_DIR")
    }
    env["NO_PROXY"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def wait_for(check: Callable[[], Any], what: str, seconds: float = 60.0) -> Any:
    """Poll `check` until it returns something truthy; fail after a generous deadline."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.2)


# ---- the board ---------------------------------------------------------------------------


@dataclass
class LiveBoard:
    url: str
    port: int
    env: dict[str, str] = field(repr=False)
    process: subprocess.Popen[bytes]
    log: Path
    # Every secret the board handed out; none may appear in a later answer or the log.
    handed_out: set[str] = field(default_factory=set, repr=False)
    passwords: set[str] = field(default_factory=set, repr=False)

    # ---- processes and the log ---------------------------------------------------------
    def worker_pids(self) -> list[int]:
        """The serving worker processes (uvicorn spawns them from the serve process)."""
        workers = []
        for pid in children(self.process.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"resource_tracker" not in cmdline:
                workers.append(pid)
        return sorted(workers)

    def worker_serving(self, client_port: int) -> int | None:
        inodes = socket_inodes(self.port, client_port)
        if not inodes:
            return None
        wanted = {f"socket:[{inode}]" for inode in inodes}
        for pid in self.worker_pids():
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                        return pid
                except OSError:
                    continue
        return None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def log_lines(self) -> list[str]:
        return self.log_text().splitlines()

    # ---- the command line --------------------------------------------------------------
    def cli(self, *args: str, stdin: str | None = None) -> str:
        """`gua-board …` against the board's database and data directory; its stdout."""
        done = subprocess.run(
            [str(BIN / "gua-board"), *args],
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, f"gua-board {args[0]}: {done.stderr[-2000:]}"
        for found in SECRET.findall(done.stderr):
            raise AssertionError(f"gua-board {args[0]} wrote a secret to stderr: {found[:14]}…")
        return done.stdout

    def cli_json(self, *args: str, stdin: str | None = None) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.cli(*args, "--json", stdin=stdin))
        self.remember(*(v for v in data.values() if isinstance(v, str) and SECRET.fullmatch(v)))
        return data

    # ---- secrets -----------------------------------------------------------------------
    def remember(self, *secret: str) -> None:
        self.handed_out.update(s for s in secret if s)

    def remember_password(self, password: str) -> None:
        self.passwords.add(password)

    def leaks_in(self, text: str, allowed: Iterable[str] = ()) -> list[str]:
        """Secrets handed out before (or passwords) found in text, shown by their prefix."""
        allowed = set(allowed)
        found = [s for s in self.handed_out | self.passwords if s in text and s not in allowed]
        return [f"{s[:14]}…" for s in found]

    # ---- HTTP --------------------------------------------------------------------------
    def client(
        self,
        token: str | None = None,
        *,
        forwarded_for: str | None = None,
        fresh_connections: bool = False,
        source_address: str | None = None,
        **kw: Any,
    ) -> httpx.Client:
        """A client of this board; fresh_connections: one TCP connection per request."""
        headers = {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if forwarded_for:
            headers["X-Forwarded-For"] = forwarded_for
        limits = httpx.Limits(max_keepalive_connections=0 if fresh_connections else 10)
        transport = httpx.HTTPTransport(limits=limits, local_address=source_address)
        return httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=TIMEOUT,
            follow_redirects=False,
            transport=transport,
            trust_env=False,
            **kw,
        )

    def metrics(self) -> str:
        with self.client() as c:
            r = c.get("/metrics")
        assert r.status_code == 200, r.text
        return r.text

    def call(
        self,
        client: httpx.Client,
        method: str,
        path: str,
        *,
        max_bytes: int = 8 * 1024 * 1024,
        allowed: Iterable[str] = (),
        check_leaks: bool = True,
        **kw: Any,
    ) -> Reply:
        """One request; the body read up to max_bytes (an event stream: its first chunk).

        A pooled connection the board closed as idle (its keep-alive and header deadlines)
        at the moment it was reused fails before any answer: sent again once, on a new one.
        """
        try:
            return self._call(client, method, path, max_bytes, allowed, check_leaks, **kw)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            return self._call(client, method, path, max_bytes, allowed, check_leaks, **kw)

    def _call(
        self,
        client: httpx.Client,
        method: str,
        path: str,
        max_bytes: int,
        allowed: Iterable[str],
        check_leaks: bool,
        **kw: Any,
    ) -> Reply:
        with client.stream(method, path, **kw) as r:
            worker = None
            stream = r.extensions.get("network_stream")
            if stream is not None:
                client_addr = stream.get_extra_info("client_addr")
                if client_addr:
                    worker = self.worker_serving(int(client_addr[1]))
            body = bytearray()
            complete = True
            streaming = "text/event-stream" in r.headers.get("content-type", "")
            for chunk in r.iter_bytes():
                body += chunk
                if streaming or len(body) > max_bytes:
                    complete = False
                    break
            reply = Reply(r.status_code, r.headers, bytes(body), complete, worker, str(r.url))
        if check_leaks:
            leaked = self.leaks_in(reply.text + str(reply.headers), allowed)
            assert not leaked, f"{method} {path} answered with secrets {leaked}: {reply!r}"
        return reply

    def sign_in(
        self,
        client: httpx.Client,
        email: str,
        password: str,
        next: str = "/",
        headers: dict[str, str] | None = None,
    ) -> Reply:
        form = self.call(client, "GET", "/signin", headers=headers)
        assert form.status_code == 200, form
        return self.call(
            client,
            "POST",
            "/signin",
            headers=headers,
            data={
                "csrf_token": csrf_of(form.text),
                "email": email,
                "password": password,
                "next": next,
            },
        )

    def signed_in_client(self, email: str, password: str, **kw: Any) -> httpx.Client:
        client = self.client(**kw)
        reply = self.sign_in(client, email, password)
        assert reply.status_code == 303, reply
        assert client.cookies.get("gua_session"), "no session cookie after signing in"
        return client

    @contextlib.contextmanager
    def signed_in(self, email: str, password: str, **kw: Any) -> Iterator[httpx.Client]:
        client = self.signed_in_client(email, password, **kw)
        try:
            yield client
        finally:
            client.close()

    def csrf(self, client: httpx.Client, path: str = "/signin") -> str:
        """The CSRF token of the client's session, from a page that has a form."""
        page = self.call(client, "GET", path)
        assert page.status_code == 200, page
        return csrf_of(page.text)

    def on_every_worker(
        self,
        send: Callable[[httpx.Client], Reply],
        check: Callable[[Reply], None],
        *,
        rounds: int = 6,
        deadline_s: float = 90.0,
    ) -> dict[int, int]:
        """Send until every worker answered (each on a new connection); check every answer.

        Connections are opened several at a time, so the kernel hands them to more than
        one worker even on an idle board. Returns answers per worker.
        """
        workers = set(self.worker_pids())
        seen: dict[int, int] = {}
        end = time.monotonic() + deadline_s
        tries = 0
        while tries < rounds or not workers <= set(seen):
            assert time.monotonic() < end, (
                f"not every worker answered within {deadline_s} s: {seen} of {sorted(workers)}"
            )
            clients = [self.client() for _ in range(4)]
            try:
                for c in clients:  # connect all first, then send on each
                    c.get("/healthz")
                for c in clients:
                    reply = send(c)
                    check(reply)
                    tries += 1
                    if reply.worker is not None:
                        seen[reply.worker] = seen.get(reply.worker, 0) + 1
            finally:
                for c in clients:
                    c.close()
            workers = set(self.worker_pids())
        return seen


def board_env(
    database_url: str,
    data_dir: Path,
    settings: dict[str, str] | None = None,
    *,
    secret_key: str | None = None,
) -> dict[str, str]:
    """The environment of a board on that database and data directory: a fresh secret key
    (48 characters) unless one is given, then `settings` (GUA_BOARD_… variables)."""
    return clean_env(
        {
            "GUA_BOARD_DATABASE_URL": database_url,
            "GUA_BOARD_DATA_DIR": str(data_dir),
            "GUA_BOARD_SECRET_KEY": secret_key or secrets.token_urlsafe(36),
            **(settings or {}),
        }
    )


def start_board(
    database_url: str,
    data_dir: Path,
    settings: dict[str, str] | None = None,
    *,
    workers: int = 1,
    host: str = "127.0.0.1",
    port: int | None = None,
    secret_key: str | None = None,
) -> LiveBoard:
    """`gua-board serve` on a free port (or `port`); waits for /healthz and its workers."""
    port = port or free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    env = board_env(database_url, data_dir, settings, secret_key=secret_key)
    log = data_dir / f"serve-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(BIN / "gua-board"), "serve", "--host", host, "--port", str(port)]
            + ["--workers", str(workers)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    board = LiveBoard(f"http://127.0.0.1:{port}", port, env, process, log)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"gua-board serve exited: {board.log_text()[-3000:]}")
        try:
            if httpx.get(f"{board.url}/healthz", timeout=5, trust_env=False).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    else:
        stop_board(board)
        raise AssertionError(f"gua-board serve did not start: {board.log_text()[-3000:]}")
    # Every worker up: uvicorn spawns them one after the other.
    while workers > 1 and len(board.worker_pids()) < workers and time.monotonic() < deadline:
        time.sleep(0.3)
    return board


def stop_board(board: LiveBoard) -> None:
    if board.process.poll() is not None:
        return
    board.process.terminate()
    try:
        board.process.wait(30)
    except subprocess.TimeoutExpired:
        board.process.kill()
        board.process.wait(30)


# ---- memory ------------------------------------------------------------------------------


@dataclass
class Peaks:
    """Peak RSS growth of each worker while a block ran (VmHWM reset before, read after)."""

    before: dict[int, int] = field(default_factory=dict)
    grown_kib: dict[int, int] = field(default_factory=dict)

    @property
    def worst_mib(self) -> float:
        return max(self.grown_kib.values(), default=0) / 1024


@contextlib.contextmanager
def measure_peaks(board: LiveBoard) -> Iterator[Peaks]:
    """Peak RSS growth of each worker while the with-block runs."""
    peaks = Peaks()
    for pid in board.worker_pids():
        reset_peak(pid)
        peaks.before[pid] = memory_kib(pid, "VmRSS")
    yield peaks
    for pid, rss in peaks.before.items():
        try:
            peaks.grown_kib[pid] = memory_kib(pid, "VmHWM") - rss
        except (OSError, AssertionError):
            # The worker died (and was replaced): that is not a bounded memory either.
            peaks.grown_kib[pid] = 10**9
