"""Sessions end when they should, in every worker: a replayed cookie opens nothing.

Each case signs a fresh person in twice (two browsers), proves the cookie opens a page on
both workers, ends the session(s) the way a person or an admin does, and replays the old
cookie on every worker: the answer is the sign-in redirect (or 401), never the page.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.security.conftest import World
from tests.security.seed import Person, add_member, new_password, unique
from tests.support.live import LiveBoard
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
