"""Personal API tokens: issued, listed without secrets, revoked at once in every worker."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.security.conftest import World
from tests.security.seed import Person, add_member, new_password, unique
from tests.support.live import LiveBoard
from tests.support.replies import SECRET, Reply


@pytest.fixture
def member(board: LiveBoard, world: World) -> Person:
    a = world.a
    email = f"{unique('tokens')}@alpha.example"
    password = new_password(board)
    reply = add_member(board, a.slug, a.admin.token, email, "member", password)
    assert reply.status_code == 201, reply
    return Person(email, password, reply.json()["apiToken"], "member")


def hosts_with(board: LiveBoard, slug: str, token: str) -> Callable[[httpx.Client], Reply]:
    def send(c: httpx.Client) -> Reply:
        return board.call(
            c,
            "GET",
            f"/api/v1/workspaces/{slug}/hosts",
            headers={"Authorization": f"Bearer {token}"},
        )

    return send


def works(reply: Reply) -> None:
    assert reply.status_code == 200, f"worker {reply.worker}: {reply}"


def refused(reply: Reply) -> None:
    assert reply.status_code == 401, f"a revoked token works (worker {reply.worker}): {reply}"
    reply.detail()


def issue(board: LiveBoard, token: str) -> Reply:
    with board.client(token) as c:
        reply = board.call(c, "POST", "/api/v1/me/api-tokens", json={})
    if reply.status_code == 201:
        board.remember(reply.json()["apiToken"])
    return reply


def test_issue_list_revoke(board: LiveBoard, world: World, member: Person) -> None:
    slug = world.a.slug
    issued = issue(board, member.token)
    assert issued.status_code == 201, issued
    body = issued.json()
    assert body["workspace"] == slug, body
    assert body["role"] == "member", body
    second = body["apiToken"]
    assert second.startswith(body["tokenPrefix"]), body
    board.on_every_worker(hosts_with(board, slug, second), works)

    with board.client(member.token) as c:
        listed = board.call(c, "GET", "/api/v1/me/api-tokens")
    assert listed.status_code == 200, listed
    assert not SECRET.search(listed.text), f"a token list shows a secret: {listed}"
    prefixes = [t["tokenPrefix"] for t in listed.json()["apiTokens"]]
    assert body["tokenPrefix"] in prefixes, prefixes
    assert member.token[:16] in prefixes, prefixes
    assert all("createdAt" in t for t in listed.json()["apiTokens"])

    with board.client(member.token) as c:
        gone = board.call(c, "DELETE", f"/api/v1/me/api-tokens/{body['tokenPrefix']}")
    assert gone.status_code == 204, gone
    board.on_every_worker(hosts_with(board, slug, second), refused)
    board.on_every_worker(hosts_with(board, slug, member.token), works)


def test_a_token_revokes_itself(board: LiveBoard, world: World, member: Person) -> None:
    prefix = member.token[:16]
    with board.client(member.token) as c:
        gone = board.call(c, "DELETE", f"/api/v1/me/api-tokens/{prefix}")
    assert gone.status_code == 204, gone
    board.on_every_worker(hosts_with(board, world.a.slug, member.token), refused)


def test_another_persons_prefix_is_not_found(
    board: LiveBoard, world: World, member: Person
) -> None:
    a = world.a
    for victim in (a.admin.token, world.b.admin.token, world.b.hosts[0].token):
        prefix = victim[: victim.index("_", 9)]
        with board.client(member.token) as c:
            reply = board.call(c, "DELETE", f"/api/v1/me/api-tokens/{prefix}")
        assert reply.status_code == 404, reply
        reply.detail()
    board.on_every_worker(hosts_with(board, a.slug, a.admin.token), works)
    with board.client(world.b.hosts[0].token) as c:
        assert board.call(c, "GET", "/agent/v1/archives").status_code == 200


def test_re_adding_with_another_role_ends_old_tokens(
    board: LiveBoard, world: World, member: Person
) -> None:
    a = world.a
    extra = issue(board, member.token)
    assert extra.status_code == 201, extra
    again = add_member(board, a.slug, a.admin.token, member.email, "finance", None)
    assert again.status_code == 201, again
    assert again.json()["role"] == "finance", again
    for old in (member.token, extra.json()["apiToken"]):
        board.on_every_worker(hosts_with(board, a.slug, old), refused)
    new = again.json()["apiToken"]
    with board.client(new) as c:
        members = board.call(c, "GET", f"/api/v1/workspaces/{a.slug}/members")
    assert members.status_code == 403, f"finance may not list members: {members}"


def test_removal_ends_every_token(board: LiveBoard, world: World, member: Person) -> None:
    a = world.a
    extra = issue(board, member.token)
    assert extra.status_code == 201, extra
    with board.client(a.admin.token) as c:
        gone = board.call(c, "DELETE", f"/api/v1/workspaces/{a.slug}/members/{member.email}")
    assert gone.status_code == 204, gone
    for old in (member.token, extra.json()["apiToken"]):
        board.on_every_worker(hosts_with(board, a.slug, old), refused)
        with board.client(old) as c:
            assert board.call(c, "POST", "/api/v1/me/api-tokens", json={}).status_code == 401


def test_tokens_per_person_are_bounded(board: LiveBoard, world: World, member: Person) -> None:
    """Minting tokens in a loop ends in a clear refusal, never a 500 or an endless list."""
    refusal = None
    for _ in range(60):
        reply = issue(board, member.token)
        if reply.status_code != 201:
            refusal = reply
            break
    assert refusal is not None, "60 live tokens for one person: no bound"
    assert 400 <= refusal.status_code < 500, refusal
    refusal.detail()
