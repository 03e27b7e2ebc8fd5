"""The `gua-board` command line against input it cannot use: an argument or a password
on stdin that is no text, an expiry of 0 or less, a port or a worker count that is
none. Each is one line on stderr and exit status 2, never a traceback, and nothing is
issued or served.

Also tried, and held: `gua-board issue-token --expires-in` nan, inf, 1e308 and -1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.board.answers import TOKEN, token_rows
from tests.board.builders import make_tenant
from tests.board.db import scalar

GUA_BOARD = str(Path(sys.executable).parent / "gua-board")


def cli(database_url: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [GUA_BOARD, *args],
        input=stdin,
        env={"GUA_BOARD_DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=120,
    )


def one_clean_line(done: subprocess.CompletedProcess[bytes]) -> str:
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 2, (done.returncode, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-2000:]
    assert not TOKEN.search(err + done.stdout.decode(errors="replace"))
    return lines[0]


async def test_cli_issue_token_refuses_odd_expiries(app: Any, database_url: str) -> None:
    """Was exit 0 for `--expires-in 0`: a token with the default lifetime."""
    await make_tenant(app, "cliexp", password=None)
    before = await token_rows(app, "cliexp")
    for hours in ("0", "-0", "-1", "nan", "inf", "721"):
        done = cli(database_url, "issue-token", "--workspace", "cliexp", f"--expires-in={hours}")
        one_clean_line(done)
    assert await token_rows(app, "cliexp") == before
    done = cli(database_url, "issue-token", "--workspace", "nope", "--expires-in", "1")
    one_clean_line(done)


async def test_cli_passwords_on_stdin_that_are_no_text_are_refused(
    app: Any, database_url: str
) -> None:
    """Was a traceback (UnicodeEncodeError) for a password that is not UTF-8."""
    await make_tenant(app, "clipw", password=None)
    before = int(await scalar(app, "SELECT count(*) FROM users"))
    for stdin in (b"\xff\xfe not utf-8 at all\n", b"caf\xe9-latin1-password\n"):
        done = cli(
            database_url,
            "create-user",
            "new@clipw.example",
            "--workspace",
            "clipw",
            "--role",
            "member",
            "--password-stdin",
            stdin=stdin,
        )
        one_clean_line(done)
        done = cli(
            database_url, "set-password", "admin@clipw.example", "--password-stdin", stdin=stdin
        )
        one_clean_line(done)
    assert int(await scalar(app, "SELECT count(*) FROM users")) == before
    for email in ("a\tb@x.example", "x" * 5000 + "@x.example", "no-at-sign", "a@b@c"):
        done = cli(database_url, "create-user", email, "--workspace", "clipw", "--role", "member")
        one_clean_line(done)
    for stdin in (b"", b"short\n"):
        done = cli(
            database_url, "set-password", "admin@clipw.example", "--password-stdin", stdin=stdin
        )
        one_clean_line(done)


def test_cli_serve_refuses_ports_and_worker_counts_that_are_none(database_url: str) -> None:
    """Was a served board: --port 99999 listened on 34463 (the port wrapped) while its log
    said 99999, and --workers 0 or -5 started one worker. Refused before anything runs,
    with a database that would let the board start (a served board never exits: the
    run's timeout is then the failure)."""
    for args in (
        ("serve", "--port", "99999"),
        ("serve", "--port", "-1"),
        ("serve", "--port", "65536"),
        ("serve", "--workers", "0"),
        ("serve", "--workers", "-5"),
        ("serve", "--workers", "1e3"),
        ("demo", "--port", "70000"),
        ("demo", "--interval", "0"),
        ("demo", "--interval", "nan"),
        ("demo", "--hosts", "-1"),
    ):
        done = subprocess.run(
            [GUA_BOARD, *args],
            env={"GUA_BOARD_DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            timeout=60,
        )
        err = done.stderr.decode(errors="replace")
        assert done.returncode == 2, (args, done.returncode, err[-500:])
        assert "Traceback" not in err, err[-2000:]


REPO = Path(__file__).resolve().parents[2]


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
