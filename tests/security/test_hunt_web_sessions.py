"""The web pages and their sessions, against an attacker with a browser (or a cookie copy).

- An open live stream of a host page (Server-Sent Events, hours long in a browser tab)
  ends when its session does: sign-out, a password change, an admin's sign-out, removal
  from the workspace, demotion to finance. It used to go on for as long as it was read.
- A demotion closes the admin pages and forms at once, in every worker; removal from one
  workspace closes that workspace's pages, JSON, CSV and stream, and leaves the other's.
- Every kind of page answer (HTML, the refresh JSON, CSV, the event stream, error pages)
  carries the security headers and is never cached.
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

OPEN_S = 60.0  # the stream's first event must arrive within
END_S = 90.0  # an ended session's stream must close within (keepalives come every 15 s)


@pytest.fixture
def person(board: LiveBoard, world: World) -> Person:
    """A fresh admin of A, with a password (so they may sign in and be demoted)."""
    a = world.a
    email = f"{unique('wsess')}@alpha.example"
    password = new_password(board)
    reply = add_member(board, a.slug, a.admin.token, email, "admin", password)
    assert reply.status_code == 201, reply
    return Person(email, password, reply.json()["apiToken"], "admin")


# ---- the live stream of a host page ---------------------------------------------------------


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


# ---- demotion and removal hold at once, everywhere ----------------------------------------------


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


# ---- every kind of page answer carries the headers ----------------------------------------------


def _guarded(reply: Reply, what: str) -> list[str]:
    h = reply.headers
    problems = []
    if "frame-ancestors 'none'" not in h.get("content-security-policy", ""):
        problems.append(f"{what}: no CSP frame-ancestors ({reply})")
    if "script-src 'self'" not in h.get("content-security-policy", ""):
        problems.append(f"{what}: no CSP script-src ({reply})")
    if h.get("x-frame-options") != "DENY":
        problems.append(f"{what}: X-Frame-Options {h.get('x-frame-options')!r}")
    if h.get("x-content-type-options") != "nosniff":
        problems.append(f"{what}: X-Content-Type-Options {h.get('x-content-type-options')!r}")
    if not h.get("referrer-policy"):
        problems.append(f"{what}: no Referrer-Policy")
    if "no-store" not in h.get("cache-control", ""):
        problems.append(f"{what}: Cache-Control {h.get('cache-control')!r}")
    return problems


def test_every_kind_of_page_answer_carries_the_security_headers(
    board: LiveBoard, world: World, person: Person
) -> None:
    a = world.a
    s = f"/w/{a.slug}"
    host = a.hosts[0].host_id
    problems: list[str] = []
    with board.client() as anonymous:
        for path in ("/signin", f"{s}/admin", f"{s}/fleet.json", "/notices/snooze?token=x"):
            problems += _guarded(board.call(anonymous, "GET", path), f"signed out: {path}")
    with board.signed_in(person.email, person.password) as c:
        for path in (
            "/account",
            f"{s}/",
            f"{s}/fleet.json",
            f"{s}/hosts/{host}",
            f"{s}/hosts/{host}.json",
            f"{s}/hosts/{host}/stream",
            f"{s}/usage.csv",
            f"{s}/statements.csv",
            f"{s}/usage?from=not-a-date",  # a 422 page
            f"{s}/usage.csv?from=not-a-date",  # a 422 JSON
            f"{s}/hosts/not-a-host",  # a 404 page
            f"/w/{world.b.slug}/",  # another workspace: 404
            "/signin",  # a redirect
        ):
            reply = board.call(c, "GET", path)
            assert reply.status_code < 500, reply
            problems += _guarded(reply, path)
        fleet = board.call(c, "GET", f"{s}/fleet.json")
        etag = fleet.headers.get("etag", "")
        again = board.call(c, "GET", f"{s}/fleet.json", headers={"If-None-Match": etag})
        if again.status_code == 304:  # a host may have pushed in between
            problems += _guarded(again, "fleet.json 304")
        forged = board.call(c, "POST", f"{s}/admin/settings", data={"csrf_token": "forged"})
        assert forged.status_code == 403, forged
        problems += _guarded(forged, "a refused form")
    assert not problems, "\n".join(problems)


# ---- an admin's page forms reach no other workspace's sessions -----------------------------------


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


# ---- finance, in a browser ----------------------------------------------------------------------


def test_finance_cannot_find_a_linux_user_through_the_pages(board: LiveBoard, world: World) -> None:
    """No process details for finance: searching, grouping or sorting the fleet by a Linux
    user tells nothing (not even how many GPUs match), and no page names one."""
    a = world.a
    user = world.a_linux_user
    s = f"/w/{a.slug}"
    host = a.hosts[0].host_id
    paths = [
        f"{s}/?q={user}",
        f"{s}/?group=user",
        f"{s}/?group=user&view=dense",
        f"{s}/?sort=user",
        f"{s}/fleet.json?q={user}",
        f"{s}/fleet.json?group=user",
        f"{s}/people",
        f"{s}/people?sort=hours",
        f"{s}/hosts/{host}?range=24h",
        f"{s}/hosts/{host}?range=7d",
        f"{s}/reservations",
    ]
    with board.signed_in(a.finance.email, a.finance.password) as c:
        nothing = board.call(c, "GET", f"{s}/fleet.json?q=no-such-user-anywhere")
        found = board.call(c, "GET", f"{s}/fleet.json?q={user}")
        for path in paths:
            reply = board.call(c, "GET", path)
            assert reply.status_code in (200, 403, 404), reply
            text = reply.text.replace(f'value="{user}"', "")  # the search box's own echo
            assert user not in text, f"finance sees a Linux user on {path}"
    assert nothing.status_code == found.status_code == 200, (nothing, found)
    shown = ("hosts", "counts")
    assert {k: found.json().get(k) for k in shown} == {k: nothing.json().get(k) for k in shown}, (
        "finance's search for a Linux user finds GPUs"
    )
