"""Accounts across workspaces: no takeover, sessions that really end, tokens people control.

Real PostgreSQL, the app in-process (httpx ASGITransport); the cross-process parts use
two app instances sharing one database, as two board processes would.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from board.app import create_app
from board.auth.passwords import PasswordGate, PasswordsBusy
from board.settings import Settings
from board.workspaces.schemas import IssuedApiToken
from tests.board.builders import make_tenant
from tests.support.databases import empty_database
from tests.web.helpers import PASSWORD, csrf_of, sign_in


def _client(app: Any, base_url: str = "http://board.test") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url)


async def _admin_page(client: httpx.AsyncClient, slug: str) -> httpx.Response:
    return await client.get(f"/w/{slug}/admin")


def _signed_in(response: httpx.Response) -> bool:
    return response.status_code == 200


async def test_adding_an_existing_account_never_changes_it(app: Any, client: Any) -> None:
    acme = await make_tenant(app, "acme")
    await make_tenant(app, "beta")
    victim = "admin@beta.example"

    # REST: acme's admin "adds" beta's admin with a password of acme's choosing.
    added = await client.post(
        "/api/v1/workspaces/acme/members",
        json={"email": victim, "role": "member", "password": "attacker-chosen-1"},
        headers=acme.auth(),
    )
    assert added.status_code == 201, added.text
    assert added.json()["existingAccount"] is True

    # The page form, the same.
    async with _client(app) as browser:
        assert (await sign_in(browser, "admin@acme.example")).status_code == 303
        form = await _admin_page(browser, "acme")
        posted = await browser.post(
            "/w/acme/admin/members",
            data={
                "csrf_token": csrf_of(form.text),
                "email": victim.upper(),
                "role": "finance",
                "password": "attacker-chosen-2",
            },
        )
        assert posted.status_code == 201, posted.text
        assert "already had an account" in posted.text

    for attempt in ("attacker-chosen-1", "attacker-chosen-2"):
        async with _client(app) as attacker:
            assert (await sign_in(attacker, victim, attempt)).status_code == 401
    async with _client(app) as owner:
        assert (await sign_in(owner, victim, PASSWORD)).status_code == 303
        # Still beta's admin.
        assert _signed_in(await _admin_page(owner, "beta"))


async def test_a_new_account_gets_its_first_password(app: Any, client: Any) -> None:
    acme = await make_tenant(app, "acme")
    added = await client.post(
        "/api/v1/workspaces/acme/members",
        json={"email": "New@Acme.example", "role": "member", "password": "first-password"},
        headers=acme.auth(),
    )
    assert added.status_code == 201
    assert added.json()["existingAccount"] is False
    assert added.json()["email"] == "new@acme.example"
    async with _client(app) as browser:
        assert (await sign_in(browser, "new@acme.example", "first-password")).status_code == 303


@pytest.mark.parametrize(
    "email", ["a<b>@acme.example", "a)b@acme.example", "(a@acme.example", "a,b@acme.example"]
)
async def test_an_address_mail_would_read_as_another_is_no_member(
    app: Any, client: Any, email: str
) -> None:
    """Notices mail members: "a<b>@x" would go to "b", "(a@x" would stop every mail."""
    acme = await make_tenant(app, "acme")
    before = await client.get("/api/v1/workspaces/acme/members", headers=acme.auth())
    added = await client.post(
        "/api/v1/workspaces/acme/members",
        json={"email": email, "role": "member"},
        headers=acme.auth(),
    )
    assert added.status_code == 422, added.text
    assert isinstance(added.json()["detail"], str)
    after = await client.get("/api/v1/workspaces/acme/members", headers=acme.auth())
    assert after.json() == before.json()


def test_a_trailing_newline_is_no_email() -> None:
    from board.auth.emails import plausible_email

    assert plausible_email("a@acme.example")
    assert not plausible_email("a@acme.example\n")


async def test_signed_out_cookie_is_worthless(app: Any) -> None:
    await make_tenant(app, "acme")
    async with _client(app) as browser:
        await sign_in(browser, "admin@acme.example")
        page = await _admin_page(browser, "acme")
        assert _signed_in(page)
        stolen = dict(browser.cookies)
        out = await browser.post("/signout", data={"csrf_token": csrf_of(page.text)})
        assert out.status_code == 303
    async with _client(app) as replay:
        replay.cookies.update(stolen)
        again = await _admin_page(replay, "acme")
        assert again.status_code == 303
        assert again.headers["location"].startswith("/signin")


async def test_signing_in_again_ends_the_browsers_old_session(app: Any) -> None:
    """A second sign-in in one browser replaces its session: the old cookie, copied
    before, no longer opens anything."""
    await make_tenant(app, "acme")
    async with _client(app) as browser:
        assert (await sign_in(browser, "admin@acme.example")).status_code == 303
        old_cookies = dict(browser.cookies)
        page = await _admin_page(browser, "acme")
        assert _signed_in(page)
        # The sign-in form redirects a signed-in browser; a post from another tab does not.
        again = await browser.post(
            "/signin",
            data={
                "csrf_token": csrf_of(page.text),
                "email": "admin@acme.example",
                "password": PASSWORD,
            },
        )
        assert again.status_code == 303, again.text
        assert _signed_in(await _admin_page(browser, "acme"))
    async with _client(app) as replay:
        replay.cookies.update(old_cookies)
        assert not _signed_in(await _admin_page(replay, "acme"))


async def test_password_change_ends_other_sessions(app: Any) -> None:
    await make_tenant(app, "acme")
    async with _client(app) as laptop, _client(app) as phone:
        await sign_in(laptop, "member@acme.example")
        await sign_in(phone, "member@acme.example")
        account = await laptop.get("/account")
        assert account.status_code == 200
        wrong = await laptop.post(
            "/account/password",
            data={
                "csrf_token": csrf_of(account.text),
                "current_password": "not-it-at-all",
                "new_password": "brand-new-password",
            },
        )
        assert wrong.status_code == 403
        changed = await laptop.post(
            "/account/password",
            data={
                "csrf_token": csrf_of(account.text),
                "current_password": PASSWORD,
                "new_password": "brand-new-password",
            },
        )
        assert changed.status_code == 303, changed.text
        # This browser carries on with its new session; the other one is signed out.
        assert (await laptop.get("/w/acme/")).status_code == 200
        assert (await phone.get("/w/acme/")).status_code == 303
    async with _client(app) as browser:
        assert (await sign_in(browser, "member@acme.example", PASSWORD)).status_code == 401
        assert (
            await sign_in(browser, "member@acme.example", "brand-new-password")
        ).status_code == 303


async def test_sign_out_everywhere_by_self_and_by_admin(app: Any, client: Any) -> None:
    acme = await make_tenant(app, "acme")
    async with _client(app) as one, _client(app) as two:
        await sign_in(one, "member@acme.example")
        await sign_in(two, "member@acme.example")
        ended = await client.post(
            "/api/v1/workspaces/acme/members/member@acme.example/sign-out", headers=acme.auth()
        )
        assert ended.status_code == 204
        assert (await one.get("/w/acme/")).status_code == 303
        assert (await two.get("/w/acme/")).status_code == 303

        await sign_in(one, "member@acme.example")
        await sign_in(two, "member@acme.example")
        account = await one.get("/account")
        out = await one.post(
            "/account/sign-out-everywhere", data={"csrf_token": csrf_of(account.text)}
        )
        assert out.status_code == 303
        assert (await one.get("/w/acme/")).status_code == 303
        assert (await two.get("/w/acme/")).status_code == 303


async def test_member_removal_ends_tokens_and_sessions(app: Any, client: Any) -> None:
    acme = await make_tenant(app, "acme")
    await make_tenant(app, "beta")
    async with _client(app) as browser:
        await sign_in(browser, "member@acme.example")
        assert (await browser.get("/w/acme/")).status_code == 200
        gone = await client.delete(
            "/api/v1/workspaces/acme/members/member@acme.example", headers=acme.auth()
        )
        assert gone.status_code == 204
        assert (await browser.get("/w/acme/")).status_code == 303
    hosts = await client.get("/api/v1/workspaces/acme/hosts", headers=acme.auth("member"))
    assert hosts.status_code == 401
    # Not a member (any more, or of another workspace): 404, nothing changes.
    again = await client.delete(
        "/api/v1/workspaces/acme/members/member@acme.example", headers=acme.auth()
    )
    assert again.status_code == 404
    other = await client.delete(
        "/api/v1/workspaces/acme/members/admin@beta.example", headers=acme.auth()
    )
    assert other.status_code == 404
    # The only admin stays.
    last = await client.delete(
        "/api/v1/workspaces/acme/members/admin@acme.example", headers=acme.auth()
    )
    assert last.status_code == 409
    assert isinstance(last.json()["detail"], str)
    for hostile in ("%00", "a" * 400, "x@y%00z"):
        r = await client.delete(f"/api/v1/workspaces/acme/members/{hostile}", headers=acme.auth())
        assert r.status_code in (400, 404), hostile  # NUL: refused at the edge


async def test_personal_api_tokens_issue_list_revoke(app: Any, client: Any) -> None:
    acme = await make_tenant(app, "acme")
    beta = await make_tenant(app, "beta")
    issued = await client.post("/api/v1/me/api-tokens", headers=acme.auth("finance"))
    assert issued.status_code == 201
    body = issued.json()
    assert body["workspace"] == "acme"
    assert body["role"] == "finance"
    new = {"Authorization": f"Bearer {body['apiToken']}"}
    assert body["apiToken"].startswith(body["tokenPrefix"] + "_")

    listed = await client.get("/api/v1/me/api-tokens", headers=new)
    assert listed.status_code == 200
    assert body["tokenPrefix"] in [t["tokenPrefix"] for t in listed.json()["apiTokens"]]
    assert body["apiToken"] not in listed.text
    assert acme.finance_token not in listed.text

    # Someone else's prefix is not found, and nothing changes.
    beta_prefix = (await client.get("/api/v1/me/api-tokens", headers=beta.auth())).json()[
        "apiTokens"
    ][0]["tokenPrefix"]
    assert (
        await client.delete(f"/api/v1/me/api-tokens/{beta_prefix}", headers=new)
    ).status_code == 404
    assert (
        await client.get("/api/v1/workspaces/beta/hosts", headers=beta.auth())
    ).status_code == 200

    # Rotate: the old token is revoked with the new one, at once.
    old_prefix = next(
        t["tokenPrefix"]
        for t in listed.json()["apiTokens"]
        if t["tokenPrefix"] != body["tokenPrefix"]
    )
    assert (
        await client.delete(f"/api/v1/me/api-tokens/{old_prefix}", headers=new)
    ).status_code == 204
    assert (
        await client.get("/api/v1/workspaces/acme/hosts", headers=acme.auth("finance"))
    ).status_code == 401
    assert (await client.get("/api/v1/workspaces/acme/hosts", headers=new)).status_code == 200
    assert (await client.get("/api/v1/me/api-tokens")).status_code == 401


async def test_re_adding_a_member_replaces_their_token(app: Any, client: Any) -> None:
    acme = await make_tenant(app, "acme")
    old = acme.auth("member")
    re_added = await client.post(
        "/api/v1/workspaces/acme/members",
        json={"email": "member@acme.example", "role": "finance"},
        headers=acme.auth(),
    )
    assert re_added.status_code == 201
    assert (await client.get("/api/v1/workspaces/acme/hosts", headers=old)).status_code == 401
    new = {"Authorization": f"Bearer {re_added.json()['apiToken']}"}
    assert (await client.get("/api/v1/workspaces/acme/hosts", headers=new)).status_code == 200


@pytest.fixture
async def second_app(settings: Settings) -> AsyncIterator[Any]:
    """Another board process on the same database."""
    other = create_app(settings, run_maintenance=False)
    async with other.router.lifespan_context(other):
        yield other


async def test_signin_limit_holds_across_processes(app: Any, second_app: Any) -> None:
    await make_tenant(app, "acme")
    limit = app.state.runtime.settings.signin_max_failures
    apps = [app, second_app]
    for attempt in range(limit):
        async with _client(apps[attempt % 2]) as guesser:
            assert (
                await sign_in(guesser, "admin@acme.example", f"guess-{attempt}")
            ).status_code == 401
    for target in apps:
        async with _client(target) as guesser:
            refused = await sign_in(guesser, "admin@acme.example", PASSWORD)
            assert refused.status_code == 429
            assert int(refused.headers["retry-after"]) >= 1
            assert "Too many failed attempts" in refused.text


async def test_sessions_end_in_every_process(app: Any, second_app: Any) -> None:
    await make_tenant(app, "acme")
    async with _client(app) as here:
        await sign_in(here, "admin@acme.example")
        cookies = dict(here.cookies)
        async with _client(second_app) as there:
            there.cookies.update(cookies)
            assert (await there.get("/w/acme/admin")).status_code == 200
            page = await here.get("/w/acme/admin")
            await here.post("/signout", data={"csrf_token": csrf_of(page.text)})
            assert (await there.get("/w/acme/admin")).status_code == 303


async def test_cookie_secure_follows_the_scheme(app: Any, settings: Settings) -> None:
    async with _client(app, "https://board.test") as tls:
        got = await tls.get("/signin")
        assert "secure" in got.headers["set-cookie"].lower()
    async with _client(app, "http://board.test") as plain:
        got = await plain.get("/signin")
        assert "secure" not in got.headers["set-cookie"].lower()
    public = settings.model_copy(update={"public_url": "https://gpus.example.org"})
    behind = create_app(public, run_maintenance=False)
    async with behind.router.lifespan_context(behind), _client(behind) as plain:
        got = await plain.get("/signin")
        assert "secure" in got.headers["set-cookie"].lower()


async def test_password_gate_bounds_concurrent_work() -> None:
    gate = PasswordGate(concurrency=1, queue=1)
    release = threading.Event()
    running: list[int] = []

    def slow(n: int) -> int:
        running.append(n)
        release.wait(60)
        return n

    first = asyncio.create_task(gate.run(slow, 1))
    second = asyncio.create_task(gate.run(slow, 2))
    deadline = time.monotonic() + 30
    while not running and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert running == [1]  # the second waits for the only slot
    with pytest.raises(PasswordsBusy):
        await gate.run(slow, 3)
    release.set()
    assert await first == 1
    assert await second == 2
    assert await gate.run(slow, 4) == 4


def test_cli_before_migrate_says_what_to_run(pg_admin_url: str, worker_tag: str) -> None:
    with empty_database(pg_admin_url, f"gua_empty_{worker_tag}") as url:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "gua-board"), "create-workspace", "acme"],
            env={"GUA_BOARD_DATABASE_URL": url, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert "gua-board migrate" in lines[0]


async def test_an_admin_cannot_sign_out_someone_elses_member(app: Any, client: Any) -> None:
    """Sessions are the person's: an admin of A may not end B's admin's sessions."""
    acme = await make_tenant(app, "acme")
    await make_tenant(app, "beta")
    victim = "admin@beta.example"
    added = await client.post(
        "/api/v1/workspaces/acme/members",
        json={"email": victim, "role": "member"},
        headers=acme.auth(),
    )
    assert added.status_code == 201
    async with _client(app) as browser:
        await sign_in(browser, victim)
        refused = await client.post(
            f"/api/v1/workspaces/acme/members/{victim}/sign-out", headers=acme.auth()
        )
        assert refused.status_code == 403
        assert isinstance(refused.json()["detail"], str)
        # Removed from acme: acme is closed to them at once, beta's session carries on.
        gone = await client.delete(f"/api/v1/workspaces/acme/members/{victim}", headers=acme.auth())
        assert gone.status_code == 204
        assert (await browser.get("/w/acme/")).status_code == 404
        assert (await browser.get("/w/beta/")).status_code == 200


async def test_member_and_token_answers_keep_their_shape(app: Any, client: Any) -> None:
    """Keys in their order, times as Python writes them (+00:00), secrets out of reprs."""
    acme = await make_tenant(app, "acme")
    added = await client.post(
        "/api/v1/workspaces/acme/members",
        json={"email": "new@acme.example", "role": "finance"},
        headers=acme.auth(),
    )
    assert list(added.json()) == ["email", "workspace", "role", "apiToken", "existingAccount"]
    members = (await client.get("/api/v1/workspaces/acme/members", headers=acme.auth())).json()
    assert members["members"][0] == {"email": "admin@acme.example", "role": "admin"}
    issued = (await client.post("/api/v1/me/api-tokens", headers=acme.auth())).json()
    assert list(issued) == ["apiToken", "tokenPrefix", "workspace", "role", "name", "expiresAt"]
    listed = (await client.get("/api/v1/me/api-tokens", headers=acme.auth())).json()
    assert list(listed) == ["workspace", "apiTokens"]
    assert list(listed["apiTokens"][0]) == [
        "tokenPrefix",
        "createdAt",
        "revokedAt",
        "name",
        "expiresAt",
    ]
    assert listed["apiTokens"][0]["createdAt"].endswith("+00:00")
    settings = (await client.get("/api/v1/workspaces/acme/settings", headers=acme.auth())).json()
    assert list(settings) == [
        "maxSampleGapSeconds",
        "staleAfterSeconds",
        "timezone",
        "retentionDays",
        "maxGpusPerHost",
        "maxReservationDays",
        "idleHeldNoticeMinutes",
        "reservationIdleNoticeMinutes",
        "digestHour",
        "maxSampleGapHistory",
        "hotTemperatureC",
        "jobIdleNoticeMinutes",
        "jobIdleEscalateMinutes",
    ]
    shown = IssuedApiToken(
        api_token=issued["apiToken"], token_prefix="p", workspace="acme", role="admin"
    )
    assert issued["apiToken"] not in repr(shown)


async def test_the_account_page_keeps_the_workspace_navigation(app: Any, client: Any) -> None:
    acme = await make_tenant(app, "acme")
    await make_tenant(app, "globex")
    await make_tenant(app, "initech")
    added = await client.post(
        "/api/v1/workspaces/acme/members",
        json={"email": "member@globex.example", "role": "admin"},
        headers=acme.auth(),
    )
    assert added.status_code == 201, added.text
    async with _client(app) as browser:
        assert (await sign_in(browser, "member@globex.example")).status_code == 303
        fleet = await browser.get("/w/globex/")
        assert 'href="/account?w=globex"' in fleet.text
        # From globex's pages, globex's bar; an admin's links where they are admin (acme).
        for path, slug in (("/account?w=globex", "globex"), ("/account?w=acme", "acme")):
            page = await browser.get(path)
            assert page.status_code == 200, page.text
            assert '<nav class="nav" aria-label="Main">' in page.text
            assert f'href="/w/{slug}/usage"' in page.text
            assert ('href="/w/acme/admin"' in page.text) is (slug == "acme")
        # No `w`, or one of another workspace: the person's first workspace, nothing of it.
        for path in ("/account", "/account?w=initech", "/account?w=" + "x" * 300):
            page = await browser.get(path)
            assert page.status_code == 200, page.text
            assert 'href="/w/acme/usage"' in page.text
            assert "initech" not in page.text.lower()
