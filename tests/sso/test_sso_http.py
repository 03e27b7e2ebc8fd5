"""Single sign-on against the real provider, over HTTP: success, and each way it fails."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from board.app import create_app
from tests.board.builders import make_tenant
from tests.sso.conftest import ASGI_BASE, CALLBACK, callback_url, sso_settings, started
from tests.web.helpers import csrf_of


async def _audit(client: httpx.AsyncClient, tenant: Any) -> list[dict[str, Any]]:
    r = await client.get("/api/v1/workspaces/acme/audit-log", headers=tenant.auth())
    assert r.status_code == 200
    events: list[dict[str, Any]] = r.json()["events"]
    return events


def _refused(r: httpx.Response, words: str) -> None:
    assert r.status_code == 400, (r.status_code, r.text)
    assert 'id="signin-error"' in r.text
    assert words in r.text
    assert "gua_pat_" not in r.text


async def test_signing_in_with_the_provider_starts_a_web_session(sso_app, sso_client) -> None:
    acme = await make_tenant(sso_app, "acme")
    url = await callback_url(sso_client, "admin@acme.example", next="/w/acme/")
    assert "code=" in url
    r = await sso_client.get(url)
    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/w/acme/"
    page = await sso_client.get("/w/acme/")
    assert page.status_code == 200
    assert "admin@acme.example" in page.text
    events = await _audit(sso_client, acme)
    signin = next(e for e in events if e["action"] == "signin.succeeded")
    assert signin["detail"] == {"method": "sso", "provider": "test"}
    assert signin["target"] == "admin@acme.example"
    # Signing out ends it like a password session.
    out = await sso_client.post("/signout", data={"csrf_token": csrf_of(page.text)})
    assert out.status_code == 303
    assert (await sso_client.get("/w/acme/")).status_code == 303


async def test_a_callback_is_used_once_and_a_code_redeemed_once(sso_app, sso_client) -> None:
    await make_tenant(sso_app, "acme")
    url = await callback_url(sso_client, "member@acme.example")
    assert (await sso_client.get(url)).status_code == 303
    # The same callback again: its state is gone.
    _refused(await sso_client.get(url), "expired or was already used")
    # The same code with a fresh, valid state: the provider refuses to redeem it twice.
    fresh = parse_qs(urlsplit(await started(sso_client)).query)["state"][0]
    code = parse_qs(urlsplit(url).query)["code"][0]
    replayed = await sso_client.get(CALLBACK, params={"state": fresh, "code": code})
    _refused(replayed, "did not accept this sign-in")


async def test_a_bad_or_foreign_state_is_refused(sso_app, sso_client) -> None:
    await make_tenant(sso_app, "acme")
    _refused(
        await sso_client.get(CALLBACK, params={"state": "made-up", "code": "x"}), "Start again"
    )
    _refused(await sso_client.get(CALLBACK), "not valid")
    _refused(await sso_client.get(CALLBACK, params={"state": "s" * 2000, "code": "x"}), "not valid")
    # A callback opened in another browser (no cookie of the one that started it).
    url = await callback_url(sso_client, "admin@acme.example")
    transport = httpx.ASGITransport(app=sso_app)
    async with httpx.AsyncClient(transport=transport, base_url=ASGI_BASE) as other:
        _refused(await other.get(url), "another browser")
        assert (await other.get("/w/acme/")).status_code == 303
    # ... and it cannot be finished afterwards by the right browser either (single use).
    _refused(await sso_client.get(url), "expired or was already used")


async def test_the_provider_refusing_is_a_page(sso_app, sso_client) -> None:
    state = parse_qs(urlsplit(await started(sso_client)).query)["state"][0]
    r = await sso_client.get(CALLBACK, params={"state": state, "error": "access_denied"})
    _refused(r, "did not sign you in")
    r = await sso_client.get("/signin/sso/nope")
    assert r.status_code == 404


async def test_an_unknown_email_is_refused(sso_app, sso_client) -> None:
    acme = await make_tenant(sso_app, "acme")
    r = await sso_client.get(await callback_url(sso_client, "stranger@elsewhere.example"))
    _refused(r, "does not sign in accounts of elsewhere.example")
    assert (await sso_client.get("/")).status_code == 303
    assert "stranger" not in str(await _audit(sso_client, acme))


async def test_an_unverified_email_is_refused(sso_app, sso_client) -> None:
    acme = await make_tenant(sso_app, "acme")
    r = await sso_client.get(await callback_url(sso_client, "unverified+admin@acme.example"))
    _refused(r, "not verified")
    failed = [e for e in await _audit(sso_client, acme) if e["action"] == "signin.failed"]
    assert failed
    assert failed[0]["detail"]["method"] == "sso"


async def test_new_people_join_only_from_the_allowed_domain(sso_app, sso_client) -> None:
    acme = await make_tenant(sso_app, "acme")
    r = await sso_client.get(await callback_url(sso_client, "someone@wrong.example"))
    _refused(r, "does not sign in accounts of wrong.example")
    r = await sso_client.get(await callback_url(sso_client, "newcomer@joiners.example"))
    assert r.status_code == 303, r.text
    members = await sso_client.get("/api/v1/workspaces/acme/members", headers=acme.auth())
    assert {"email": "newcomer@joiners.example", "role": "member"} in members.json()["members"]
    assert "member.joined" in [e["action"] for e in await _audit(sso_client, acme)]


async def test_password_sign_in_can_be_turned_off(settings, oidc_provider) -> None:
    configured = sso_settings(
        settings, oidc_provider, password_signin=False, allowed_domains=["acme.example"]
    )
    app = create_app(configured, run_maintenance=False)
    async with app.router.lifespan_context(app):
        await make_tenant(app, "acme")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=ASGI_BASE) as client:
            form = await client.get("/signin")
            assert form.status_code == 200
            assert 'type="password"' not in form.text
            assert "Sign in with Test IdP" in form.text
            r = await client.post(
                "/signin",
                data={
                    "csrf_token": "whatever",
                    "email": "admin@acme.example",
                    "password": "correct-horse-battery",
                },
            )
            assert r.status_code == 403
            assert "Password sign-in is turned off" in r.text
            r = await client.post(
                "/signin",
                headers={"Accept": "application/json"},
                data={"email": "a@b.c", "password": "x"},
            )
            assert r.status_code == 403
            assert isinstance(r.json()["detail"], str)
            assert (await client.get("/w/acme/")).status_code == 303
