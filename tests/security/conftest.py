"""One served board for the whole security suite, two seeded workspaces to attack (A's and
B's), a scratch workspace, a workspace of each module's own (`other`), a fresh scratch
host and an admin of the scratch workspace for page sessions.

The board is `gua-board serve --workers 2` as a subprocess (real argon2 costs, real
uvicorn, two processes that share nothing but PostgreSQL), on a database cloned from the
migrated template of tests/conftest.py. Its limits are set low enough that a test can
reach them quickly, and high enough that ordinary requests never do. The harness is
tests/support/live.py.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.security.seed import (
    Host,
    Person,
    Tenant,
    add_member,
    day_archives,
    enroll,
    issue_enrollment,
    make_tenant,
    new_password,
    push_history,
    unique,
    upload_archive,
    yesterday,
)
from tests.support.databases import cloned_database
from tests.support.live import LiveBoard, start_board, stop_board
from tests.support.replies import SECRET

MAX_FAILURES = 3
HEADER_SECONDS = 5.0
BODY_IDLE_SECONDS = 5.0
BODY_SECONDS = 12.0
ARCHIVE_MAX_UNCOMPRESSED = 4 * 1024 * 1024
ARCHIVE_MAX_ROWS = 20_000
SETTINGS = {
    "GUA_BOARD_SIGNIN_MAX_FAILURES": str(MAX_FAILURES),
    "GUA_BOARD_SIGNIN_WINDOW_SECONDS": "900",
    "GUA_BOARD_HTTP_HEADER_SECONDS": str(HEADER_SECONDS),
    "GUA_BOARD_HTTP_BODY_IDLE_SECONDS": str(BODY_IDLE_SECONDS),
    "GUA_BOARD_HTTP_BODY_SECONDS": str(BODY_SECONDS),
    "GUA_BOARD_ARCHIVE_MAX_UNCOMPRESSED_BYTES": str(ARCHIVE_MAX_UNCOMPRESSED),
    "GUA_BOARD_ARCHIVE_MAX_ROWS": str(ARCHIVE_MAX_ROWS),
    "GUA_BOARD_LOG_LEVEL": "info",
}


@pytest.fixture(scope="session")
def security_database_url(pg_admin_url: str, template_db: str, worker_tag: str) -> Iterator[str]:
    with cloned_database(pg_admin_url, template_db, f"gua_sec_{worker_tag}") as url:
        yield url


@pytest.fixture(scope="session")
def board(
    security_database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveBoard]:
    served = start_board(
        security_database_url, tmp_path_factory.mktemp("board"), SETTINGS, workers=2
    )
    try:
        yield served
    finally:
        stop_board(served)


@pytest.fixture(scope="module", autouse=True)
def _log_never_holds_a_secret(board: LiveBoard) -> Iterator[None]:
    """After each module: the server's log holds no token secret and no password."""
    yield
    text = board.log_text()
    whole = sorted({s[:14] + "…" for s in SECRET.findall(text)})
    assert not whole, f"the server's log holds token secrets: {whole}"
    leaked = board.leaks_in(text)
    assert not leaked, f"the server's log holds secrets or passwords: {leaked}"


def db(url: str, sql: str, *args: object) -> object:
    """One value from the board's database (to prove that nothing was stored)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql.encode(), args).fetchone()
    return None if row is None else row[0]


@dataclass
class World:
    """Workspaces A (the attacker's) and B (the victim's), with hosts and history."""

    a: Tenant
    b: Tenant
    # B's names as its hosts and admins chose them: never in an answer to A.
    b_names: list[str] = field(default_factory=list)
    b_enrollment_prefix: str = ""
    b_pat_prefix: str = ""
    # A Linux user on A's host (finance must never see it).
    a_linux_user: str = ""
    # B's booking, notification channel and one of its deliveries (ids A must not reach).
    b_reservation_id: str = ""
    b_channel_id: str = ""
    b_delivery_id: str = ""


@pytest.fixture(scope="session")
def world(board: LiveBoard) -> World:
    a = make_tenant(board, "alpha")
    b = make_tenant(board, "bravo")
    marker = secrets.token_hex(3)
    enroll(board, a, f"alpha-host-{marker}", via_cli=True)
    a_user = f"alphauser{marker}"
    push_history(board, a.hosts[0], users=(a_user,))
    names = {
        "hostname": f"bravo-secret-host-{marker}",
        "user": f"bravosecretuser{marker}",
        "process": f"bravo-secret-proc-{marker}",
        "gpu": f"BRAVO SECRET GPU {marker}",
        "archive_user": f"bravoarchiveuser{marker}",
        "archive_process": f"bravo-archive-proc-{marker}",
        "pending": f"bravo-pending-{marker}",
    }
    host = enroll(board, b, names["hostname"], via_cli=True)
    push_history(
        board,
        host,
        users=(names["user"],),
        process_names=(names["process"],),
        gpu_names=(names["gpu"],),
    )
    gpu, procs = day_archives(names["archive_user"], names["archive_process"])
    day = yesterday().date().isoformat()
    for table, body in (("gpu_sample", gpu), ("proc_sample", procs)):
        reply = upload_archive(board, host, table, day, body)
        assert reply.status_code == 201, reply
    issue_enrollment(board, b, names["pending"])
    with board.client(b.admin.token) as c:
        listed = board.call(c, "GET", f"/api/v1/workspaces/{b.slug}/enrollment-tokens")
        extra = board.call(c, "POST", "/api/v1/me/api-tokens", json={})
    pending = (
        [
            t["tokenPrefix"]
            for t in listed.json()["enrollmentTokens"]
            if t.get("displayName") == names["pending"]
        ]
        if listed.status_code == 200
        else []
    )
    pat_prefix = ""
    if extra.status_code == 201:  # personal API tokens may not have landed yet
        board.remember(extra.json()["apiToken"])
        pat_prefix = extra.json()["tokenPrefix"]
    booked, channel, delivery = _b_bookings_and_notices(board, b, host)
    return World(
        a=a,
        b=b,
        b_names=[*names.values(), *(p.email for p in b.people)],
        b_enrollment_prefix=pending[0] if pending else "",
        b_pat_prefix=pat_prefix,
        a_linux_user=a_user,
        b_reservation_id=booked,
        b_channel_id=channel,
        b_delivery_id=delivery,
    )


def _b_bookings_and_notices(board: LiveBoard, b: Tenant, host: Host) -> tuple[str, str, str]:
    """A booking of B's host by B's member, and an email channel of B's with a test
    delivery: real ids of B's for the routes that name them."""
    start = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    base = f"/api/v1/workspaces/{b.slug}"
    with board.client(b.member.token) as c:
        booked = board.call(
            c,
            "POST",
            f"{base}/reservations",
            json={
                "hostId": host.host_id,
                "start": start.isoformat(),
                "end": (start + timedelta(hours=1)).isoformat(),
            },
        )
    assert booked.status_code == 201, booked
    with board.client(b.admin.token) as c:
        made = board.call(
            c,
            "POST",
            f"{base}/notification-channels",
            json={"kind": "email", "emails": [f"ops@{b.slug}.example"]},
        )
        assert made.status_code == 201, made
        channel = str(made.json()["channelId"])
        tested = board.call(c, "POST", f"{base}/notification-channels/{channel}/test")
        assert tested.status_code < 300, tested
        listed = board.call(c, "GET", f"{base}/notifications").json()["notifications"]
    assert listed, "the test notice made no delivery"
    return str(booked.json()["reservationId"]), channel, str(listed[0]["deliveryId"])


@pytest.fixture(scope="session")
def scratch(board: LiveBoard) -> Tenant:
    """A third workspace for tests that change settings, revoke hosts or push odd names."""
    return make_tenant(board, "charlie")


@pytest.fixture(scope="module")
def other(board: LiveBoard) -> Tenant:
    """A workspace of the module's own (others change the scratch one's settings), and
    for what must never cross from one workspace to another."""
    return make_tenant(board, "delta")


@pytest.fixture(scope="module")
def admin(board: LiveBoard, scratch: Tenant) -> Person:
    """An admin of the scratch workspace with a password, for page sessions."""
    email = f"{unique('page-admin')}@charlie.example"
    password = new_password(board)
    reply = add_member(board, scratch.slug, scratch.admin.token, email, "admin", password)
    assert reply.status_code == 201, reply
    return Person(email, password, reply.json()["apiToken"], "admin")


@pytest.fixture
def host(board: LiveBoard, scratch: Tenant) -> Host:
    """A fresh host of the scratch workspace."""
    return enroll(board, scratch, unique("scratch-host"))


__all__ = ["World", "db", "unique"]
