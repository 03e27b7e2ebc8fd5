"""Sign-in under attack: bounded memory for a flood, one failure count for all workers.

The served board hashes with its real argon2 cost (64 MiB a check), which is the point: a
flood of sign-ins with unknown emails from many addresses must not grow a worker by more
than a generous bound, and the failed-attempt limit for one email from one address holds
whichever worker answers.
"""

from __future__ import annotations

import itertools
import re
import secrets
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.security.conftest import MAX_FAILURES, World
from tests.security.seed import Person, add_member, new_password, unique
from tests.support.live import LiveBoard, measure_peaks
from tests.support.replies import Reply

FLOOD = 200
CONCURRENT = 32
BOUND_MIB = 300


@pytest.fixture
def person(board: LiveBoard, world: World) -> Person:
    a = world.a
    email = f"{unique('limited')}@alpha.example"
    password = new_password(board)
    reply = add_member(board, a.slug, a.admin.token, email, "member", password)
    assert reply.status_code == 201, reply
    return Person(email, password, reply.json()["apiToken"], "member")


_addresses = itertools.count(1)


def address() -> str:
    """A new client address behind the trusted proxy (benchmarking range, never routed)."""
    n = next(_addresses)
    return f"198.18.{n // 250}.{n % 250 + 1}"


def attempt(board: LiveBoard, email: str, password: str, forwarded_for: str | None) -> Reply:
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else None
    with board.client() as c:
        return board.sign_in(c, email, password, headers=headers)


def test_flood_of_unknown_emails_keeps_workers_small(board: LiveBoard, world: World) -> None:
    def one(i: int) -> int:
        try:
            reply = attempt(
                board,
                f"nobody-{i}-{secrets.token_hex(4)}@nowhere.example",
                f"guess-{i}-{secrets.token_hex(4)}",
                f"203.0.113.{i % 250 + 1}",
            )
        except httpx.HTTPError as exc:
            return -len(type(exc).__name__)  # a dropped connection: counted, shown below
        return reply.status_code

    with measure_peaks(board) as peaks, ThreadPoolExecutor(CONCURRENT) as pool:
        statuses = list(pool.map(one, range(FLOOD)))
    counts = {s: statuses.count(s) for s in set(statuses)}
    assert set(counts) <= {401, 429}, f"sign-in flood answers: {counts}"
    grown = {pid: round(kib / 1024) for pid, kib in peaks.grown_kib.items()}
    assert peaks.worst_mib < BOUND_MIB, (
        f"a worker grew by {peaks.worst_mib:.0f} MiB during {FLOOD} sign-ins "
        f"({CONCURRENT} at once); per worker: {grown} MiB"
    )
    # The board still signs real people in afterwards.
    a = world.a
    assert attempt(board, a.admin.email, a.admin.password, address()).status_code == 303


def test_failure_limit_holds_across_workers(board: LiveBoard, person: Person) -> None:
    where = address()
    for i in range(MAX_FAILURES):
        reply = attempt(board, person.email, f"wrong-{i}", where)
        assert reply.status_code == 401, reply

    def send(c: httpx.Client) -> Reply:
        return board.sign_in(c, person.email, person.password, headers={"X-Forwarded-For": where})

    def blocked(reply: Reply) -> None:
        assert reply.status_code == 429, (
            f"worker {reply.worker} let a sign-in through after {MAX_FAILURES} failures: {reply}"
        )

    seen = board.on_every_worker(send, blocked)
    assert len(seen) >= 2, seen
    # The limit is the guesser's, not a lock on the account: elsewhere the person signs in.
    assert attempt(board, person.email, person.password, address()).status_code == 303


def test_forwarded_for_from_an_untrusted_peer_is_ignored(board: LiveBoard, person: Person) -> None:
    """Only the trusted proxy may name the client: a direct client spoofing
    X-Forwarded-For still counts as itself, so rotating the header does not reset the limit."""
    untrusted = "127.0.0.2"
    answers = []
    for i in range(MAX_FAILURES + 2):
        with board.client(source_address=untrusted) as c:
            reply = board.sign_in(
                c, person.email, f"wrong-{i}", headers={"X-Forwarded-For": address()}
            )
        answers.append(reply.status_code)
    assert answers[:MAX_FAILURES] == [401] * MAX_FAILURES, answers
    assert answers[MAX_FAILURES:] == [429, 429], (
        f"spoofed X-Forwarded-For from {untrusted} reset the limit: {answers}"
    )


def test_429_says_when_to_retry(board: LiveBoard, person: Person) -> None:
    where = address()
    for i in range(MAX_FAILURES):
        attempt(board, person.email, f"wrong-{i}", where)
    reply = attempt(board, person.email, person.password, where)
    assert reply.status_code == 429, reply
    assert reply.headers.get("retry-after", "").isdigit(), reply.headers


def test_unknown_email_and_wrong_password_look_the_same(board: LiveBoard, person: Person) -> None:
    """No account enumeration through sign-in: same status, same sentence."""
    known = attempt(board, person.email, "wrong-password", address())
    unknown = attempt(board, f"{unique('ghost')}@alpha.example", "wrong-password", address())
    assert known.status_code == unknown.status_code == 401, (known, unknown)
    sentence = re.compile(r'role="alert"[^>]*>([^<]+)<')
    said = sentence.findall(known.text)
    assert said, known
    assert said == sentence.findall(unknown.text), (known, unknown)
