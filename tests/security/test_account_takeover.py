"""Cross-workspace account takeover: A's admin adds B's admin to A with a password of A's.

Users are global, so the password field of "add a member" must only ever set a brand-new
account's first password; an existing account keeps its password, email and every other
membership, whoever adds it to whichever workspace and however the email is spelled.
"""

from __future__ import annotations

import pytest

from tests.security.conftest import World
from tests.security.seed import Person, add_member, new_password, unique
from tests.support.live import LiveBoard

SPELLINGS = (
    lambda e: e,
    str.upper,
    lambda e: f"  {e}  ",
    lambda e: e.capitalize(),
)


@pytest.fixture
def victim(board: LiveBoard, world: World) -> Person:
    """A fresh admin of B (a brand-new account: B's admin gives it a first password)."""
    b = world.b
    email = f"{unique('victim')}@bravo.example"
    password = new_password(board)
    reply = add_member(board, b.slug, b.admin.token, email, "admin", password)
    assert reply.status_code == 201, reply
    assert reply.json().get("existingAccount") is False, reply
    return Person(email, password, reply.json()["apiToken"], "admin")


def _b_role_of(board: LiveBoard, world: World, email: str) -> str | None:
    with board.client(world.b.admin.token) as c:
        listed = board.call(c, "GET", f"/api/v1/workspaces/{world.b.slug}/members")
    assert listed.status_code == 200, listed
    roles = {m["email"]: m["role"] for m in listed.json()["members"]}
    return roles.get(email)


def _victim_still_whole(board: LiveBoard, world: World, victim: Person, attacker_pw: str) -> None:
    with board.client() as c:
        refused = board.sign_in(c, victim.email, attacker_pw)
    assert refused.status_code in (401, 403), f"A's password opened B's admin: {refused}"
    with board.client() as c:
        ok = board.sign_in(c, victim.email, victim.password)
        assert ok.status_code == 303, f"B's admin lost their own password: {ok}"
        admin_page = board.call(c, "GET", f"/w/{world.b.slug}/admin")
    assert admin_page.status_code == 200, admin_page
    assert _b_role_of(board, world, victim.email) == "admin"
    with board.client(victim.token) as c:
        still = board.call(c, "GET", f"/api/v1/workspaces/{world.b.slug}/hosts")
    assert still.status_code == 200, f"B's admin's own B token stopped working: {still}"


@pytest.mark.parametrize("spelling", range(len(SPELLINGS)))
def test_rest_add_never_sets_an_existing_password(
    board: LiveBoard, world: World, victim: Person, spelling: int
) -> None:
    attacker_pw = new_password(board)
    email = SPELLINGS[spelling](victim.email)
    reply = add_member(board, world.a.slug, world.a.admin.token, email, "member", attacker_pw)
    assert reply.status_code == 201, reply
    body = reply.json()
    assert body["existingAccount"] is True, body
    assert body["email"] == victim.email, body
    assert body["workspace"] == world.a.slug, body
    assert body["role"] == "member", body
    _victim_still_whole(board, world, victim, attacker_pw)


def test_page_add_never_sets_an_existing_password(
    board: LiveBoard, world: World, victim: Person
) -> None:
    a = world.a
    attacker_pw = new_password(board)
    with board.signed_in(a.admin.email, a.admin.password) as c:
        csrf = board.csrf(c, f"/w/{a.slug}/admin")
        reply = board.call(
            c,
            "POST",
            f"/w/{a.slug}/admin/members",
            data={
                "csrf_token": csrf,
                "email": victim.email,
                "role": "admin",
                "password": attacker_pw,
            },
        )
    assert reply.status_code in (200, 201, 303), reply
    assert attacker_pw not in reply.text
    _victim_still_whole(board, world, victim, attacker_pw)


def test_a_token_for_b_admin_reaches_nothing_of_b(
    board: LiveBoard, world: World, victim: Person
) -> None:
    """The API token A's admin got for B's admin (in A) is A's only: it cannot list,
    revoke or issue B tokens, nor read B."""
    reply = add_member(board, world.a.slug, world.a.admin.token, victim.email, "member", None)
    assert reply.status_code == 201, reply
    in_a = reply.json()["apiToken"]
    with board.client(victim.token) as c:
        mine = board.call(c, "GET", "/api/v1/me/api-tokens")
    assert mine.status_code == 200, mine
    b_prefixes = [t["tokenPrefix"] for t in mine.json()["apiTokens"]]
    assert b_prefixes
    with board.client(in_a) as c:
        listed = board.call(c, "GET", "/api/v1/me/api-tokens")
        assert listed.status_code == 200, listed
        assert not set(b_prefixes) & {t["tokenPrefix"] for t in listed.json()["apiTokens"]}
        for prefix in b_prefixes:
            gone = board.call(c, "DELETE", f"/api/v1/me/api-tokens/{prefix}")
            assert gone.status_code == 404, gone
        issued = board.call(c, "POST", "/api/v1/me/api-tokens", json={})
        assert issued.status_code == 201, issued
        board.remember(issued.json()["apiToken"])
        assert issued.json()["workspace"] == world.a.slug, issued
        b_hosts = board.call(c, "GET", f"/api/v1/workspaces/{world.b.slug}/hosts")
        assert b_hosts.status_code == 404, b_hosts
    with board.client(victim.token) as c:
        assert board.call(c, "GET", f"/api/v1/workspaces/{world.b.slug}/hosts").status_code == 200


def test_a_new_account_gets_its_first_password(board: LiveBoard, world: World) -> None:
    """The other half of the rule: a brand-new person can sign in with what was set."""
    email = f"{unique('newbie')}@alpha.example"
    password = new_password(board)
    reply = add_member(board, world.a.slug, world.a.admin.token, email, "member", password)
    assert reply.status_code == 201, reply
    assert reply.json()["existingAccount"] is False
    with board.client() as c:
        assert board.sign_in(c, email, password).status_code == 303


def test_removing_b_admin_from_a_leaves_b_alone(
    board: LiveBoard, world: World, victim: Person
) -> None:
    reply = add_member(board, world.a.slug, world.a.admin.token, victim.email, "member", None)
    assert reply.status_code == 201, reply
    with board.client(world.a.admin.token) as c:
        gone = board.call(c, "DELETE", f"/api/v1/workspaces/{world.a.slug}/members/{victim.email}")
    assert gone.status_code == 204, gone
    assert _b_role_of(board, world, victim.email) == "admin"
    with board.client(victim.token) as c:
        assert board.call(c, "GET", f"/api/v1/workspaces/{world.b.slug}/hosts").status_code == 200
