"""Round 13 of the hunt: our agent facing a hostile board and hostile local input, single
sign-on email claims, and the `gua-board` CLI with hostile arguments.

Each test asserts the behaviour that must hold, and failed on the defect it names.

Attacks that held (no test): redirects of a push, a claim or the live stream to another
origin (never followed with the token); 100 MB, endless chunked, gzip-bomb and trickling
bodies; Retry-After of -1, 1e999, inf, nan, 1_0, past and year-9999 dates; a token with
spaces, DEL or a leading space (sent, refused by no one); /proc names with NUL, escape,
invalid UTF-8; vanished pids; a full disk while spooling (the snapshot is "lost", the loop
goes on); SSO state of one provider on another's callback, a state from another browser,
a replayed state; `next` of //x, /\\x, /%09/x, tabs and control characters; /metrics
labels (report route templates, a fixed set of rejection reasons); `gua-board
issue-token --expires-in` nan, inf, 1e308, -1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from agent.cli import main as agent_main
from agent.client import BoardClient, Timeouts
from agent.fake import FakeCollector
from agent.payload import HostIdentity
from agent.runner import Runner
from agent.sender import Sender
from agent.spool import Spool, entry_name
from tests.agent.fakes import logging_left_as_found
from tests.board.builders import make_tenant
from tests.security.test_hunt_integrations import (  # noqa: F401 (fixtures)
    SigningProvider,
    _claims,
    settings,
    signing_provider,
    smtp,
    sso_app,
)

REPO = Path(__file__).resolve().parents[2]
SECRET = "r13-s3cr3t-part-never-in-a-log-0123456789"
TOKEN = f"gua_agent_hunt1300_{SECRET}"


# ---- a board on loopback that answers whatever it is told --------------------------------


class FakeBoard:
    """A TCP server on 127.0.0.1; `handler(conn)` runs per connection after the request."""

    def __init__(self, handler: Callable[[socket.socket], None]) -> None:
        self.handler = handler
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                self.handler(conn)
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def accepted(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")


@pytest.fixture
def fake_board() -> Iterator[Callable[[Callable[[socket.socket], None]], FakeBoard]]:
    boards: list[FakeBoard] = []

    def start(handler: Callable[[socket.socket], None]) -> FakeBoard:
        boards.append(FakeBoard(handler))
        return boards[-1]

    yield start
    for b in boards:
        b.close()


@pytest.fixture
def agent_logging() -> Iterator[None]:
    """The agent's CLI installs a root handler; it must not outlive the test."""
    with logging_left_as_found():
        yield


def write_config(path: Path, **changed: str) -> Path:
    data = {
        "serverUrl": "http://127.0.0.1:9",
        "hostId": "5b0e7c3e-1f0a-4c55-9d6b-2a8f3b1c9e40",
        "displayName": "node-13",
        "agentToken": TOKEN,
        "tokenPrefix": "gua_agent_hunt1300",
    }
    path.write_text(json.dumps({**data, **changed}))
    os.chmod(path, 0o600)
    return path


# ---- 1. the agent token in the log --------------------------------------------------------


def test_a_config_token_with_a_trailing_newline_never_reaches_the_log(
    tmp_path: Path,
    fake_board: Callable[[Callable[[socket.socket], None]], FakeBoard],
    capsys: pytest.CaptureFixture[str],
    agent_logging: None,
) -> None:
    """Was: a config whose agentToken ends in a newline (a hand-edited config, a token
    pasted with its line end) makes h11 refuse the header with "Illegal header value
    b'Bearer gua_agent_…\\n'"; the agent takes that for a network error and logs it at
    WARNING: "board not reachable (network error (LocalProtocolError: Illegal header value
    b'Bearer gua_agent_hunt1300_<the whole secret>\\n'))". The redaction filter looks for
    the token as loaded (with a real newline), the message holds its repr (backslash, n),
    so the secret goes to the journal in clear on every outage. The token must never be
    printed: refuse such a config (exit 4, like the claim refuses a token that is not
    visible ASCII), or keep the exception text out of the message."""
    b = fake_board(accepted)
    config = write_config(tmp_path / "config.json", serverUrl=b.url, agentToken=TOKEN + "\n")
    agent_main(
        [
            "push-once",
            "--fake",
            "--config",
            str(config),
            "--spool-dir",
            str(tmp_path / "spool"),
            "--retry-budget",
            "1s",
        ]
    )
    out, err = capsys.readouterr()
    assert SECRET not in out + err, err


# ---- 2. a config the agent cannot use ------------------------------------------------------


@pytest.mark.parametrize(
    "changed",
    [{"serverUrl": "http://[::1"}, {"agentToken": TOKEN + "\u00e9"}],
    ids=["url-bracket", "token-non-ascii"],
)
def test_a_config_the_agent_cannot_use_is_exit_4_not_a_traceback(
    tmp_path: Path, changed: dict[str, str], agent_logging: None
) -> None:
    """Was: `gua-agent push-once` with a config whose serverUrl is `http://[::1` raised
    ValueError("Invalid IPv6 URL") out of urlsplit in normalize_server_url, and one whose
    agentToken holds a non-ASCII letter raised UnicodeEncodeError ("'ascii' codec can't
    encode character '\\xe9' in position 32") building the httpx client: a traceback and
    exit 1, which systemd's Restart=on-failure restarts forever (only 3 and 4 stop it).
    `gua-agent enroll --server-url http://[::1` is the same traceback. docs/agent.md: a
    missing or invalid config is exit 4 with a sentence."""
    config = write_config(tmp_path / "config.json", **changed)
    argv = ["push-once", "--fake", "--config", str(config), "--retry-budget", "1s"]
    assert agent_main([*argv, "--spool-dir", str(tmp_path / "spool")]) == 4


# ---- 3. a corrupt spool ------------------------------------------------------------------


def _directory_named_like_an_entry(spool: Path) -> None:
    spool.mkdir()
    (spool / entry_name(datetime.now(UTC))).mkdir()


def _symlink_loop_named_like_an_entry(spool: Path) -> None:
    spool.mkdir()
    entry = spool / entry_name(datetime.now(UTC))
    entry.symlink_to(entry)


def _spool_path_is_a_file(spool: Path) -> None:
    spool.write_text("not a directory")


@pytest.mark.parametrize(
    "corrupt",
    [_directory_named_like_an_entry, _symlink_loop_named_like_an_entry, _spool_path_is_a_file],
    ids=["entry-is-a-directory", "entry-symlink-loop", "spool-is-a-file"],
)
def test_a_corrupt_spool_does_not_end_the_tick_loop(
    tmp_path: Path,
    fake_board: Callable[[Callable[[socket.socket], None]], FakeBoard],
    corrupt: Callable[[Path], None],
) -> None:
    """Was: after the fresh snapshot was accepted, the replay of the spool raised out of
    Runner.run: IsADirectoryError ("[Errno 21] Is a directory: …/20261204T143734.751784Z
    .json") from Spool.read for a directory named like an entry, OSError ("[Errno 40] Too
    many levels of symbolic links") from Spool.entries' stat for a symlink loop, and
    NotADirectoryError from Spool._remove_stale_temps' listdir when the spool path is a
    file. Spool.read catches FileNotFoundError only and Sender.drain nothing, so one
    bad entry ends `gua-agent run` with a traceback on every start (systemd restarts it,
    it dies again on its first tick): the host goes dark. A spool entry that cannot be
    read must be skipped (or set aside) and the loop must keep ticking."""
    spool_dir = tmp_path / "spool"
    corrupt(spool_dir)
    b = fake_board(accepted)
    with BoardClient(b.url, agent_token=TOKEN) as client:
        runner = Runner(
            FakeCollector("node-13"),
            Sender(client, Spool(spool_dir)),
            HostIdentity("node-13", "1.0.0"),
            interval=0.3,
        )
        runner.run(max_ticks=3)
    assert (runner.ticks, runner.last_outcome) == (3, "sent")


# ---- 4. trickling headers ------------------------------------------------------------------


def test_trickling_response_headers_are_bounded_by_the_budget(
    fake_board: Callable[[Callable[[socket.socket], None]], FakeBoard],
) -> None:
    """Was: a board that sends its status line and then one header line every 200 ms
    held post_observation(budget=1.0) for as long as it liked (still waiting after 15 s
    in the probe; h11 takes up to 16 KiB of head, so one byte every 9 s is 40 hours).
    httpx's read timeout bounds each read, and _exchange's own deadline starts only once
    the headers are in, so a tick of 30 s was not ended by its deadline as docs/agent.md
    promises ("Sends within a tick (including retries) end by the next tick's start").
    The whole exchange, headers included, must end within the budget (here: well inside
    20 s for a budget of 1 s)."""

    def trickle(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 202 Accepted\r\n")
        for _ in range(1500):  # 300 s of headers at most
            conn.sendall(b"X-A: b\r\n")
            time.sleep(0.2)
        conn.sendall(b"Content-Length: 0\r\n\r\n")

    b = fake_board(trickle)
    result: list[Any] = []
    client = BoardClient(b.url, agent_token=TOKEN, timeouts=Timeouts(connect=5.0, read=10.0))
    started = time.monotonic()
    thread = threading.Thread(
        target=lambda: result.append(client.post_observation(b"{}", budget=1.0)), daemon=True
    )
    thread.start()
    thread.join(20.0)
    assert result, f"still waiting after {time.monotonic() - started:.0f} s (budget 1 s)"


# ---- 5. an agent argument that overflows ---------------------------------------------------


@pytest.mark.parametrize("age", ["1000000000d", "9" * 400])
def test_an_overflowing_spool_max_age_is_a_usage_error(
    tmp_path: Path, age: str, agent_logging: None
) -> None:
    """Was: `gua-agent push-once --spool-max-age 1000000000d` ended in OverflowError
    ("days=1000000000; must have magnitude <= 999999999") and 400 nines (parsed to inf) in
    OverflowError ("cannot convert float infinity to integer"), both from
    timedelta(seconds=…) in cmd_push after the config was read: a traceback and exit 1.
    A bad command-line value is exit 2 with a sentence (docs/agent.md, Exit codes)."""
    config = write_config(tmp_path / "config.json")
    argv = ["push-once", "--fake", "--config", str(config), "--spool-max-age", age]
    with pytest.raises(SystemExit) as exited:
        agent_main([*argv, "--spool-dir", str(tmp_path / "spool"), "--retry-budget", "1s"])
    assert exited.value.code == 2


# ---- 6, 7. single sign-on: whose email is it ---------------------------------------------


async def _sign_in_with(
    application: Any, provider: SigningProvider, changed: dict[str, Any]
) -> httpx.Response:
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as client:
        started = await client.get("/signin/sso/stub", params={"next": "/w/acme/"})
        assert started.status_code == 303, started.text
        query = parse_qs(urlsplit(started.headers["location"]).query)
        provider.claims = _claims(provider, query["nonce"][0], changed)
        return await client.get(
            "/signin/sso/stub/callback", params={"state": query["state"][0], "code": "c"}
        )


@pytest.mark.parametrize("verified", ["false", "False", "0"])
async def test_an_email_the_provider_marks_unverified_as_a_string_is_refused(
    sso_app: Any,  # noqa: F811 (the fixture imported above)
    signing_provider: SigningProvider,  # noqa: F811
    verified: str,
) -> None:
    """Was: an ID token with `"email": "admin@acme.example", "email_verified": "false"`
    (a string, as some providers write booleans) signed in as acme's admin: 303 to
    /w/acme/ with a session. oidc._verified keeps email_verified only when it is a bool
    (a string becomes None, "not said") and account_for refuses only `is False`. Anyone
    who can register that email, unverified, at such a provider takes the account over.
    sso-and-audit.md: "an email the provider marks as not verified is refused"."""
    await make_tenant(sso_app, "acme")
    reply = await _sign_in_with(sso_app, signing_provider, {"email_verified": verified})
    assert reply.status_code == 400, (reply.status_code, reply.headers.get("location"))
    assert "gua_session" not in reply.cookies


async def test_an_email_that_only_lowercases_to_an_account_is_not_that_account(
    sso_app: Any,  # noqa: F811 (the fixture imported above)
    signing_provider: SigningProvider,  # noqa: F811
) -> None:
    """Was: an ID token whose verified email is "\\u212aate@acme.example" (KELVIN SIGN,
    U+212A, another mailbox than kate@…) signed in as kate@acme.example: oidc._verified
    lower-cases the claim with str.lower(), which maps U+212A to an ASCII "k", and
    find_user then matches the ASCII account. Whoever gets a
    provider to vouch for such an address takes over the account it folds to. Only
    ASCII case may be folded (or an address that changes under Unicode folding refused);
    "KATE@ACME.EXAMPLE" still signs in as kate, which this test checks too."""
    from board.workspaces import service as workspaces

    await make_tenant(sso_app, "acme")
    runtime = sso_app.state.runtime
    async with runtime.sessions() as session:
        workspace = await workspaces.get_workspace(session, "acme")
        await workspaces.add_member(
            session, workspace, "kate@acme.example", "member", "correct-horse-battery"
        )
        await session.commit()
    same = await _sign_in_with(sso_app, signing_provider, {"email": "KATE@ACME.EXAMPLE"})
    assert same.status_code == 303, same.text[:300]
    folded = await _sign_in_with(sso_app, signing_provider, {"email": "\u212aate@acme.example"})
    assert folded.status_code == 400, (folded.status_code, folded.headers.get("location"))
    assert "gua_session" not in folded.cookies


# ---- 8. the gua-board CLI ------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["sign-out", b"\xff@x.example"],
        ["revoke-api-token", b"gua_pat_\xff", "--workspace", "acme"],
        ["create-user", b"\xff@x.example", "--workspace", "acme", "--role", "member"],
    ],
    ids=["sign-out", "revoke-api-token", "create-user"],
)
def test_an_argument_that_is_not_utf8_is_a_sentence_not_a_traceback(
    database_url: str, tmp_path: Path, argv: list[Any]
) -> None:
    """Was: an argument that is not UTF-8 (Python reads it as a lone surrogate) reached
    psycopg and ended in a traceback, "UnicodeEncodeError: 'utf-8' codec can't encode
    character '\\udcff' in position 0: surrogates not allowed", exit 1, for sign-out,
    revoke-api-token and create-user (create-workspace already answers with a sentence).
    A bad argument is exit 2 with `gua-board: …` and no traceback, as for a bad password
    on stdin."""
    env = {
        **os.environ,
        "GUA_BOARD_DATABASE_URL": database_url,
        "GUA_BOARD_DATA_DIR": str(tmp_path / "data"),
    }
    subprocess.run(
        [sys.executable, "-c", "from board.cli import main; main()", "create-workspace", "acme"],
        env=env,
        cwd=REPO,
        capture_output=True,
        timeout=120,
        check=False,
    )
    done = subprocess.run(
        [sys.executable, "-c", "from board.cli import main; main()", *argv],
        env=env,
        cwd=REPO,
        capture_output=True,
        timeout=120,
        check=False,
    )
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err[-600:]
    assert done.returncode == 2, (done.returncode, err[-600:])
