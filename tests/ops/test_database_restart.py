"""A PostgreSQL restart under push load (`pg_ctl stop -m fast`, then `-m immediate`) in
front of `gua-board serve --workers 2`: while the database is away every answer is a
503 with a string detail and Retry-After (pages: a 503 page), never a 500 or a reset
connection; no worker dies; once it is back the board serves again by itself, and
every push it acknowledged is stored."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.ops.cluster import Cluster, private_cluster
from tests.ops.fleet import Fleet, enroll, make_fleet, observation, sample_value
from tests.support.live import LiveBoard, start_board, stop_board, wait_for
from tests.support.processes import children

# The whole test (two outages, a 2-worker board's start) on a slow, shared 2-core box.
pytestmark = pytest.mark.timeout(110)

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
PUSHERS = 3
MAINTENANCE_RUNS = "gua_board_maintenance_runs_total"


@dataclass
class Answer:
    at: float
    host: str
    observed_at: str
    status: int | None  # None: no HTTP answer (reset, protocol error, timeout)
    problem: str = ""


@dataclass
class Pushers:
    """A few agents pushing as fast as the board answers, every answer kept."""

    board: LiveBoard
    tokens: dict[str, str]  # hostId -> agent token
    answers: list[Answer] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for host, token in self.tokens.items():
            thread = threading.Thread(target=self._push, args=(host, token), daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)

    def _push(self, host: str, token: str) -> None:
        auth = {"Authorization": f"Bearer {token}"}
        with self.board.client() as client:
            while not self.stopping.is_set():
                body = observation(datetime.now(UTC))
                try:
                    r = client.post("/agent/v1/observations", json=body, headers=auth)
                except httpx.HTTPError as exc:
                    self._keep(Answer(time.monotonic(), host, "", None, repr(exc)))
                    continue
                answer = Answer(time.monotonic(), host, body["observedAt"], r.status_code)
                if r.status_code != 202:
                    answer.problem = problem_of_503(r)
                self._keep(answer)
                if r.status_code != 202:
                    time.sleep(0.2)  # as an agent backs off; the outage is still hit often

    def _keep(self, answer: Answer) -> None:
        with self.lock:
            self.answers.append(answer)

    def since(self, moment: float) -> list[Answer]:
        with self.lock:
            return [a for a in self.answers if a.at >= moment]

    def all_met(self, moment: float, *, acknowledged: bool) -> bool:
        """Whether every pusher had a push acknowledged (or refused) after `moment`."""
        met = {a.host for a in self.since(moment) if (a.status == 202) == acknowledged}
        return len(met) == len(self.tokens)


def problem_of_503(r: httpx.Response) -> str:
    """What is wrong with an answer that should be a JSON 503 ("" when nothing is)."""
    if r.status_code != 503:
        return f"status {r.status_code}: {r.text[:300]}"
    try:
        detail = r.json().get("detail")
    except ValueError:
        return f"503 without JSON: {r.text[:300]}"
    if not isinstance(detail, str) or not detail:
        return f"503 without a string detail: {r.text[:300]}"
    if not r.headers.get("retry-after", "").isdigit():
        return "503 without Retry-After"
    return ""


def sign_in(board: LiveBoard, fleet: Fleet) -> dict[str, str]:
    with board.client() as c:
        page = c.get("/signin")
        found = _CSRF.search(page.text)
        assert found, page.text[:500]
        form = {"csrf_token": found.group(1), "email": fleet.email, "password": fleet.password}
        r = c.post("/signin", data={**form, "next": "/"})
        assert r.status_code == 303, r.text[:500]
        return {"gua_session": r.cookies["gua_session"]}


def assert_outage_answers(
    board: LiveBoard, fleet: Fleet, cookie: dict[str, str], token: str
) -> None:
    """While the database is away: pages are 503 pages, the API 503 with a detail."""
    with board.client(cookies=cookie) as c:
        for path in ("/w/acme/", "/signin"):
            page = c.get(path, headers={"Accept": "text/html"})
            assert page.status_code == 503, (path, page.status_code, page.text[:500])
            assert page.headers["content-type"].startswith("text/html"), path
            assert "<html" in page.text.lower(), page.text[:500]
            assert page.headers.get("retry-after", "").isdigit(), path
        api = c.get("/api/v1/workspaces/acme/hosts", headers=fleet.auth())
        assert problem_of_503(api) == "", api.text[:500]
        ready = c.get("/readyz")
        assert problem_of_503(ready) == "", ready.text[:500]
    # An agent's live stream: refused with a 503 where its token must be looked up (the
    # listener is down, so nothing is cached), or let in on a token still cached.
    status, body = agent_stream_answer(board, token)
    assert status in (101, 503), (status, body[:300])
    if status == 503:
        assert isinstance(json.loads(body).get("detail"), str), body[:300]


def agent_stream_answer(board: LiveBoard, token: str) -> tuple[int, bytes]:
    """The status the upgrade of an agent's live stream got (101: let in), and its body."""
    url = board.url.replace("http://", "ws://") + "/agent/v1/stream"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with connect(url, additional_headers=headers, proxy=None, open_timeout=30):
            return 101, b""
    except InvalidStatus as refused:
        return refused.response.status_code, refused.response.body or b""


def stored(database_url: str) -> set[tuple[str, datetime]]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT h.public_id::text, o.observed_at FROM host_observations o "
            "JOIN hosts h ON h.workspace_id = o.workspace_id AND h.id = o.host_id"
        ).fetchall()
    return {(str(host), at.astimezone(UTC)) for host, at in rows}


def workers_of(board: LiveBoard) -> list[int]:
    """The server's worker processes (its children but multiprocessing's resource tracker)."""
    found = []
    for pid in children(board.process.pid):
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return sorted(found)


def restart(
    cluster: Cluster,
    mode: str,
    board: LiveBoard,
    fleet: Fleet,
    cookie: dict[str, str],
    pushers: Pushers,
) -> None:
    """Stop the database with `mode`, check the outage's answers, start it, see it back."""
    runs = sample_value(board.metrics(), MAINTENANCE_RUNS)
    cluster.stop(mode)
    down = time.monotonic()
    # Each pusher has met the outage (not just a push in flight as it began).
    wait_for(lambda: pushers.all_met(down + 0.5, acknowledged=False), f"pushes refused ({mode})")
    assert_outage_answers(board, fleet, cookie, next(iter(pushers.tokens.values())))
    cluster.start()
    up = time.monotonic()
    # Back by itself: every pusher is acknowledged again, the pages answer.
    wait_for(lambda: pushers.all_met(up, acknowledged=True), f"pushes acknowledged again ({mode})")
    with board.client(cookies=cookie) as c:
        wait_for(lambda: c.get("/w/acme/").status_code == 200, "the board page again")
    # The maintenance leader lost its lock's connection; a process leads and runs again.
    wait_for(
        lambda: sample_value(board.metrics(), MAINTENANCE_RUNS) > runs, f"maintenance ({mode})"
    )


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with private_cluster() as pg:
        yield pg


def test_a_database_restart_answers_503_and_the_board_recovers(
    cluster: Cluster, tmp_path: Path
) -> None:
    database_url = cluster.create_database("board")
    board = start_board(
        database_url,
        tmp_path / "data",
        {"GUA_BOARD_MAINTENANCE_LEADER_RETRY_SECONDS": "1"},
        workers=2,
    )
    pushers: Pushers | None = None
    try:
        fleet = make_fleet(board, "acme")
        hosts = [enroll(board, fleet, f"gpu-{i}") for i in range(PUSHERS)]
        cookie = sign_in(board, fleet)
        workers = wait_for(
            lambda: workers_of(board) if len(workers_of(board)) == 2 else None, "2 workers"
        )
        pushers = Pushers(board, {h["hostId"]: h["agentToken"] for h in hosts})
        pushers.start()
        began = time.monotonic()
        wait_for(lambda: any(a.status == 202 for a in pushers.since(began)), "first pushes")

        for mode in ("fast", "immediate"):
            restart(cluster, mode, board, fleet, cookie, pushers)
        pushers.stop()

        bad = [a for a in pushers.answers if a.status not in (202, 503) or a.problem]
        assert not bad, "\n".join(f"{a.status}: {a.problem}" for a in bad[:20])
        acknowledged = {
            (a.host, datetime.fromisoformat(a.observed_at))
            for a in pushers.answers
            if a.status == 202
        }
        missing = acknowledged - stored(database_url)
        assert not missing, f"{len(missing)} acknowledged pushes were not stored"
        # No worker died and was replaced by uvicorn's supervisor.
        assert workers_of(board) == workers
        assert board.process.poll() is None
    finally:
        if pushers is not None:
            pushers.stop()
        stop_board(board)
