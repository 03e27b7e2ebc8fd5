"""Sessions end when they should, in every worker: a replayed cookie opens nothing, and
an open live stream of a host page (or the fleet page's live heat-map) ends with its
session (a stream of the person's other session goes on). A demotion closes the admin
pages at once; removal from one workspace closes its pages, JSON, CSV and stream and
leaves the other's; an admin's page form reaches no other workspace's sessions.

Each case signs a fresh person in twice (two browsers), proves the cookie opens a page on
both workers, ends the session(s) the way a person or an admin does, and replays the old
cookie on every worker: the answer is the sign-in redirect (or 401), never the page.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.security.conftest import World, db
from tests.security.seed import Person, Tenant, add_member, new_password, unique
from tests.support.live import TIMEOUT, LiveBoard
from tests.support.replies import Reply


@pytest.fixture
def person(board: LiveBoard, world: World) -> Person:
    """A fresh admin of A (so the admin page is theirs to open)."""
    a = world.a
    email = f"{unique('sessions')}@alpha.example"
    password = new_password(board)
    reply = add_member(board, a.slug, a.admin.token, email, "admin", password)
    assert reply.status_code == 201, reply
    return Person(email, password, reply.json()["apiToken"], "admin")


def sign_in(board: LiveBoard, person: Person) -> tuple[httpx.Client, str]:
    client = board.signed_in_client(person.email, person.password)
    return client, str(client.cookies["gua_session"])


def replay(board: LiveBoard, cookie: str, path: str) -> Callable[[httpx.Client], Reply]:
    def send(c: httpx.Client) -> Reply:
        return board.call(c, "GET", path, headers={"Cookie": f"gua_session={cookie}"})

    return send


def opens(reply: Reply) -> None:
    assert reply.status_code == 200, f"the live session did not open the page: {reply}"


def ended(reply: Reply) -> None:
    location = reply.headers.get("location", "")
    assert reply.status_code == 401 or (
        reply.status_code in (302, 303, 307) and location.startswith("/signin")
    ), f"a replayed cookie still opens the page (worker {reply.worker}): {reply}"


def both_workers(board: LiveBoard, cookie: str, path: str, check: Callable[[Reply], None]) -> None:
    seen = board.on_every_worker(replay(board, cookie, path), check)
    assert len(seen) >= 2, f"only one worker answered: {seen}"


def test_sign_out_ends_the_session_in_every_worker(
    board: LiveBoard, world: World, person: Person
) -> None:
    admin = f"/w/{world.a.slug}/admin"
    browser, cookie = sign_in(board, person)
    other, other_cookie = sign_in(board, person)
    both_workers(board, cookie, admin, opens)
    csrf = board.csrf(browser, admin)
    out = board.call(browser, "POST", "/signout", data={"csrf_token": csrf})
    assert out.status_code == 303, out
    both_workers(board, cookie, admin, ended)
    # Signing out one browser leaves the person's other browser signed in.
    both_workers(board, other_cookie, admin, opens)
    browser.close()
    other.close()


def test_password_change_ends_every_session(board: LiveBoard, world: World, person: Person) -> None:
    admin = f"/w/{world.a.slug}/admin"
    browser, cookie = sign_in(board, person)
    other, other_cookie = sign_in(board, person)
    both_workers(board, other_cookie, admin, opens)
    new = new_password(board)
    csrf = board.csrf(browser, "/account")
    wrong = board.call(
        browser,
        "POST",
        "/account/password",
        data={"csrf_token": csrf, "current_password": "not-the-password", "new_password": new},
    )
    assert wrong.status_code in (401, 403), wrong
    both_workers(board, other_cookie, admin, opens)
    changed = board.call(
        browser,
        "POST",
        "/account/password",
        data={"csrf_token": csrf, "current_password": person.password, "new_password": new},
    )
    assert changed.status_code in (200, 303), changed
    assert new not in changed.text
    assert person.password not in changed.text
    both_workers(board, cookie, admin, ended)
    both_workers(board, other_cookie, admin, ended)
    with board.client() as c:
        assert board.sign_in(c, person.email, person.password).status_code in (401, 403)
    with board.client() as c:
        assert board.sign_in(c, person.email, new).status_code == 303
    browser.close()
    other.close()


def test_removal_ends_the_session(board: LiveBoard, world: World, person: Person) -> None:
    a = world.a
    browser, cookie = sign_in(board, person)
    both_workers(board, cookie, "/account", opens)
    with board.client(a.admin.token) as c:
        gone = board.call(c, "DELETE", f"/api/v1/workspaces/{a.slug}/members/{person.email}")
    assert gone.status_code == 204, gone
    both_workers(board, cookie, "/account", ended)
    both_workers(board, cookie, f"/w/{a.slug}/admin", ended)
    browser.close()


def test_admin_signs_a_member_out_everywhere(
    board: LiveBoard, world: World, person: Person
) -> None:
    a = world.a
    admin = f"/w/{a.slug}/admin"
    first, cookie = sign_in(board, person)
    second, other_cookie = sign_in(board, person)
    both_workers(board, cookie, admin, opens)
    with board.client(a.admin.token) as c:
        out = board.call(c, "POST", f"/api/v1/workspaces/{a.slug}/members/{person.email}/sign-out")
    assert out.status_code == 204, out
    both_workers(board, cookie, admin, ended)
    both_workers(board, other_cookie, admin, ended)
    # The person is still a member and may sign in again.
    with board.client() as c:
        assert board.sign_in(c, person.email, person.password).status_code == 303
    first.close()
    second.close()


def test_own_sign_out_everywhere(board: LiveBoard, world: World, person: Person) -> None:
    admin = f"/w/{world.a.slug}/admin"
    browser, cookie = sign_in(board, person)
    other, other_cookie = sign_in(board, person)
    both_workers(board, other_cookie, admin, opens)
    csrf = board.csrf(browser, "/account")
    out = board.call(browser, "POST", "/account/sign-out-everywhere", data={"csrf_token": csrf})
    assert out.status_code == 303, out
    both_workers(board, cookie, admin, ended)
    both_workers(board, other_cookie, admin, ended)
    browser.close()
    other.close()


def test_a_forged_or_altered_cookie_opens_nothing(
    board: LiveBoard, world: World, person: Person
) -> None:
    admin = f"/w/{world.a.slug}/admin"
    browser, cookie = sign_in(board, person)
    for forged in (
        cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB"),
        cookie + "x",
        "",
        "null",
        "a" * 5000,
        cookie.upper(),
    ):
        reply = board.call(browser, "GET", admin, headers={"Cookie": f"gua_session={forged}"})
        ended(reply)
    browser.close()


def test_sign_in_issues_a_new_session(board: LiveBoard, world: World, person: Person) -> None:
    """No session fixation: the anonymous cookie from the form is not the signed-in one."""
    with board.client() as c:
        form = board.call(c, "GET", "/signin")
        anonymous = c.cookies.get("gua_session")
        reply = board.sign_in(c, person.email, person.password)
        assert reply.status_code == 303, reply
        signed = c.cookies.get("gua_session")
    assert form.status_code == 200
    assert signed
    assert signed != anonymous
    if anonymous:
        both_workers(board, anonymous, f"/w/{world.a.slug}/admin", ended)


OPEN_S = 60.0  # the stream's first event must arrive within
END_S = 90.0  # an ended session's stream must close within (keepalives come every 15 s)


@dataclass
class Listener:
    """A browser tab's EventSource: reads the stream in a thread until the board ends it."""

    board: LiveBoard
    cookie: str
    path: str
    status: int | None = None
    chunks: list[bytes] = field(default_factory=list)
    error: str = ""
    opened: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    grew: threading.Condition = field(default_factory=threading.Condition)
    stopping: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Listener:
        threading.Thread(target=self._read, daemon=True).start()
        assert self.opened.wait(OPEN_S), f"the stream did not open: {self.status} {self.error}"
        assert self.status == 200, (self.status, self.error, self.board.log_text()[-3000:])
        assert self.chunks[0].startswith(b"event: hello"), self.chunks[0][:200]
        return self

    def _read(self) -> None:
        """As an EventSource does, a connection that fails before any answer is opened
        again (a loaded machine can stall past the board's header deadline); once the
        stream has answered, its end is final."""
        deadline = time.monotonic() + OPEN_S
        errors: list[str] = []
        try:
            while True:
                try:
                    self._read_once()
                    return
                except httpx.TransportError as exc:
                    errors.append(repr(exc))
                    if self.status is not None or time.monotonic() > deadline:
                        raise
                    time.sleep(1.0)
        except httpx.HTTPError as exc:
            self.error = "; ".join(errors) or repr(exc)
        finally:
            self.opened.set()
            self.ended.set()

    def _read_once(self) -> None:
        headers = {"Cookie": f"gua_session={self.cookie}", "Accept": "text/event-stream"}
        with (
            httpx.Client(
                base_url=self.board.url, headers=headers, timeout=TIMEOUT, trust_env=False
            ) as c,
            c.stream("GET", self.path) as r,
        ):
            self.status = r.status_code
            for chunk in r.iter_bytes():
                with self.grew:
                    self.chunks.append(chunk)
                    self.grew.notify_all()
                self.opened.set()
                if self.stopping.is_set():
                    break

    def stop(self) -> None:
        """Hang up at the next event (the thread is a daemon either way)."""
        self.stopping.set()

    def still_sends(self) -> None:
        """One more event (a keepalive at least) arrives, and the stream is still open."""
        with self.grew:
            seen = len(self.chunks)
            assert self.grew.wait_for(lambda: len(self.chunks) > seen, END_S), "no event came"
        assert not self.ended.is_set(), self.error

    def closes(self, how: str) -> None:
        assert self.ended.wait(END_S), (
            f"after {how}, the live stream opened before still sends "
            f"({len(self.chunks)} events so far)"
        )
        assert not self.error, f"the stream failed instead of ending: {self.error}"


def _signed_in(board: LiveBoard, person: Person) -> tuple[httpx.Client, str]:
    client = board.signed_in_client(person.email, person.password)
    return client, str(client.cookies["gua_session"])


def _stream_path(tenant: Tenant) -> str:
    return f"/w/{tenant.slug}/hosts/{tenant.hosts[0].host_id}/stream"


def _sign_out(board: LiveBoard, world: World, person: Person, browser: httpx.Client) -> None:
    out = board.call(
        browser, "POST", "/signout", data={"csrf_token": board.csrf(browser, "/account")}
    )
    assert out.status_code == 303, out


def _password_change(board: LiveBoard, world: World, person: Person, browser: httpx.Client) -> None:
    # From another browser: the stream's session is one of the "other sessions".
    with board.signed_in(person.email, person.password) as other:
        csrf = board.csrf(other, "/account")
        changed = board.call(
            other,
            "POST",
            "/account/password",
            data={
                "csrf_token": csrf,
                "current_password": person.password,
                "new_password": new_password(board),
            },
        )
    assert changed.status_code == 303, changed


def _admin_signs_out(board: LiveBoard, world: World, person: Person, browser: httpx.Client) -> None:
    a = world.a
    with board.client(a.admin.token) as c:
        out = board.call(c, "POST", f"/api/v1/workspaces/{a.slug}/members/{person.email}/sign-out")
    assert out.status_code == 204, out


def _removal(board: LiveBoard, world: World, person: Person, browser: httpx.Client) -> None:
    a = world.a
    with board.client(a.admin.token) as c:
        gone = board.call(c, "DELETE", f"/api/v1/workspaces/{a.slug}/members/{person.email}")
    assert gone.status_code == 204, gone


def _demotion_to_finance(
    board: LiveBoard, world: World, person: Person, browser: httpx.Client
) -> None:
    reply = add_member(board, world.a.slug, world.a.admin.token, person.email, "finance", None)
    assert reply.status_code == 201, reply


ENDINGS: dict[str, Callable[[LiveBoard, World, Person, httpx.Client], None]] = {
    "sign-out": _sign_out,
    "a password change in another browser": _password_change,
    "an admin's sign-out of the member": _admin_signs_out,
    "removal from the workspace": _removal,
    "demotion to finance": _demotion_to_finance,
}


@pytest.mark.parametrize("how", list(ENDINGS))
def test_an_open_live_stream_ends_with_its_session(
    board: LiveBoard, world: World, person: Person, how: str
) -> None:
    """Was: the host page's stream, once open, was never checked again, so a copied cookie
    kept receiving a workspace's live utilization after every way a session ends."""
    browser, cookie = _signed_in(board, person)
    stream = Listener(board, cookie, _stream_path(world.a)).start()
    ENDINGS[how](board, world, person, browser)
    stream.closes(how)
    browser.close()


@pytest.mark.parametrize("how", ["sign-out", "demotion to finance"])
def test_the_fleet_pages_live_stream_ends_with_its_session(
    board: LiveBoard, world: World, person: Person, how: str
) -> None:
    """The fleet's frames (/w/{slug}/fleet/stream) are re-checked as the host's stream."""
    browser, cookie = _signed_in(board, person)
    stream = Listener(board, cookie, f"/w/{world.a.slug}/fleet/stream").start()
    ENDINGS[how](board, world, person, browser)
    stream.closes(how)
    browser.close()


def test_a_stream_of_another_live_session_goes_on(
    board: LiveBoard, world: World, person: Person
) -> None:
    """Signing one browser out ends its stream only: the person's other tab keeps going."""
    browser, cookie = _signed_in(board, person)
    other, other_cookie = _signed_in(board, person)
    path = _stream_path(world.a)
    ending, staying = Listener(board, cookie, path).start(), Listener(board, other_cookie, path)
    staying.start()
    _sign_out(board, world, person, browser)
    ending.closes("sign-out")
    staying.still_sends()
    staying.stop()
    browser.close()
    other.close()


def _every_worker(board: LiveBoard, cookie: str, method: str, path: str, **kw: Any) -> list[Reply]:
    replies: list[Reply] = []

    def send(c: httpx.Client) -> Reply:
        return board.call(c, method, path, headers={"Cookie": f"gua_session={cookie}"}, **kw)

    seen = board.on_every_worker(send, replies.append)
    assert len(seen) >= 2, f"only one worker answered: {seen}"
    return replies


def test_a_demotion_closes_the_admin_pages_at_once(
    board: LiveBoard, world: World, person: Person
) -> None:
    a = world.a
    admin = f"/w/{a.slug}/admin"
    browser, cookie = _signed_in(board, person)
    csrf = board.csrf(browser, admin)  # the admin page's form, loaded while still an admin
    before = _stale_after(board, a.slug)
    reply = add_member(board, a.slug, a.admin.token, person.email, "member", None)
    assert reply.status_code == 201, reply
    for answer in _every_worker(board, cookie, "GET", admin):
        assert answer.status_code == 403, answer
    for answer in _every_worker(
        board,
        cookie,
        "POST",
        f"{admin}/settings",
        data={"csrf_token": csrf, "staleAfterSeconds": "4321"},
    ):
        assert answer.status_code == 403, answer
    assert _stale_after(board, a.slug) == before, "a demoted admin's form changed the settings"
    # Still a member: the fleet opens, and so does the live stream.
    for answer in _every_worker(board, cookie, "GET", f"/w/{a.slug}/"):
        assert answer.status_code == 200, answer
    Listener(board, cookie, _stream_path(a)).start().stop()
    browser.close()


def _stale_after(board: LiveBoard, slug: str) -> object:
    return db(
        board.env["GUA_BOARD_DATABASE_URL"],
        "SELECT stale_after_seconds FROM workspaces WHERE slug = %s",
        slug,
    )


def test_removal_from_one_workspace_closes_it_and_leaves_the_other(
    board: LiveBoard, world: World, scratch: Tenant, person: Person
) -> None:
    a = world.a
    joined = add_member(board, scratch.slug, scratch.admin.token, person.email, "member", None)
    assert joined.status_code == 201, joined
    browser, cookie = _signed_in(board, person)
    stream = Listener(board, cookie, _stream_path(a)).start()
    host = a.hosts[0].host_id
    closed = [
        f"/w/{a.slug}/",
        f"/w/{a.slug}/admin",
        f"/w/{a.slug}/fleet.json",
        f"/w/{a.slug}/hosts/{host}",
        f"/w/{a.slug}/hosts/{host}.json",
        f"/w/{a.slug}/hosts/{host}/stream",
        f"/w/{a.slug}/fleet/stream",
        f"/w/{a.slug}/usage.csv",
        f"/w/{a.slug}/statements.csv",
        f"/w/{a.slug}/people",
    ]
    for path in closed:
        assert board.call(browser, "GET", path).status_code == 200, path
    _removal(board, world, person, browser)
    for path in closed:
        for answer in _every_worker(board, cookie, "GET", path):
            assert answer.status_code == 404, (path, answer)
            assert a.hosts[0].display_name not in answer.text, (path, answer)
    stream.closes("removal from the workspace")
    # The session lives on for the other workspace.
    for answer in _every_worker(board, cookie, "GET", f"/w/{scratch.slug}/"):
        assert answer.status_code == 200, answer
    browser.close()


def test_an_admin_page_cannot_sign_another_workspaces_admin_out(
    board: LiveBoard, world: World, scratch: Tenant, person: Person
) -> None:
    """A's admin adds the admin of another workspace to A, then uses A's admin page to
    sign them out everywhere (403: that reaches the other workspace) or to remove them
    (allowed: it ends only A's membership, and none of their sessions)."""
    a = world.a
    email = f"{unique('victim')}@charlie.example"
    password = new_password(board)
    made = add_member(board, scratch.slug, scratch.admin.token, email, "admin", password)
    assert made.status_code == 201, made
    victim = Person(email, password, made.json()["apiToken"], "admin")
    planted = add_member(board, a.slug, a.admin.token, email, "member", None)
    assert planted.status_code == 201, planted
    victim_browser, victim_cookie = _signed_in(board, victim)
    admin = f"/w/{a.slug}/admin"
    with board.signed_in(person.email, person.password) as attacker:
        csrf = board.csrf(attacker, admin)
        out = board.call(
            attacker, "POST", f"{admin}/members/{email}/sign-out", data={"csrf_token": csrf}
        )
        assert out.status_code == 403, out
        for answer in _every_worker(board, victim_cookie, "GET", f"/w/{scratch.slug}/admin"):
            assert answer.status_code == 200, answer
        removed = board.call(
            attacker, "POST", f"{admin}/members/{email}/remove", data={"csrf_token": csrf}
        )
        assert removed.status_code == 303, removed
    for answer in _every_worker(board, victim_cookie, "GET", f"/w/{scratch.slug}/admin"):
        assert answer.status_code == 200, answer
    for answer in _every_worker(board, victim_cookie, "GET", f"/w/{a.slug}/"):
        assert answer.status_code == 404, answer
    victim_browser.close()
