"""Whose accounts a provider speaks for: the email domains it is configured for, existing
accounts included, unless the operator says it speaks for all (allow_any_domain)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from board.settings import Settings
from tests.board.builders import Tenant, make_tenant
from tests.sso.conftest import (
    Provider,
    browser,
    callback_url,
    provider_entry,
    sso_settings,
    started_app,
)


async def _audit(client: httpx.AsyncClient, tenant: Tenant) -> list[dict[str, Any]]:
    r = await client.get(f"/api/v1/workspaces/{tenant.slug}/audit-log", headers=tenant.auth())
    assert r.status_code == 200, r.text
    events: list[dict[str, Any]] = r.json()["events"]
    return events


async def test_a_provider_does_not_sign_in_an_account_of_another_domain(
    settings: Any, oidc_provider: Provider
) -> None:
    """Was: acme's provider (allowed_domains acme.example) that vouched for
    admin@globex.example, verified, signed in globex's password-only admin: an existing
    account signed in whatever its domain."""
    configured = sso_settings(settings, oidc_provider, allowed_domains=["acme.example"])
    async with started_app(configured) as app:
        await make_tenant(app, "acme")
        globex = await make_tenant(app, "globex")
        async with browser(app) as client:
            r = await client.get(await callback_url(client, "admin@globex.example", "/w/globex/"))
            assert r.status_code == 400, (r.status_code, r.headers.get("location"))
            assert 'id="signin-error"' in r.text
            assert "does not sign in accounts of globex.example" in r.text
            assert "gua_session" not in r.cookies
            assert (await client.get("/w/globex/")).status_code == 303  # to the sign-in form
            failed = [e for e in await _audit(client, globex) if e["action"] == "signin.failed"]
            assert [e["detail"]["method"] for e in failed] == ["sso"]
            assert "globex.example" in failed[0]["detail"]["reason"]
            assert "signin.succeeded" not in [e["action"] for e in await _audit(client, globex)]
            # The same provider still signs in acme's own people.
            r = await client.get(await callback_url(client, "member@acme.example", "/w/acme/"))
            assert r.status_code == 303, r.text
            assert r.headers["location"] == "/w/acme/"
            assert (await client.get("/w/acme/")).status_code == 200
        # A listed domain, no account, no workspace to join: nobody is made.
        async with browser(app) as client:
            r = await client.get(await callback_url(client, "nobody@acme.example"))
            assert r.status_code == 400
            assert "no account for nobody@acme.example" in r.text


async def test_an_operator_can_let_a_provider_speak_for_every_domain(
    settings: Any, oidc_provider: Provider
) -> None:
    configured = sso_settings(settings, oidc_provider, allow_any_domain=True)
    async with started_app(configured) as app:
        await make_tenant(app, "globex")
        async with browser(app) as client:
            r = await client.get(await callback_url(client, "admin@globex.example", "/w/globex/"))
            assert r.status_code == 303, r.text
            assert (await client.get("/w/globex/")).status_code == 200
        # It signs in existing accounts only: nobody joins without a listed domain.
        async with browser(app) as client:
            r = await client.get(await callback_url(client, "new@globex.example"))
            assert r.status_code == 400
            assert "no account for new@globex.example" in r.text


async def test_a_subdomain_is_not_its_parent_domain(settings: Any, oidc_provider: Provider) -> None:
    configured = sso_settings(settings, oidc_provider, allowed_domains=["example"])
    async with started_app(configured) as app:
        await make_tenant(app, "acme")
        async with browser(app) as client:
            r = await client.get(await callback_url(client, "admin@acme.example"))
            assert r.status_code == 400
            assert "does not sign in accounts of acme.example" in r.text


def _provider(oidc_provider: Provider, **extra: Any) -> list[dict[str, Any]]:
    return [provider_entry(oidc_provider, **extra)]


def test_a_provider_with_no_domains_is_refused_at_start_up(oidc_provider: Provider) -> None:
    """No domain list must not mean "speaks for all": the board says what to set."""
    with pytest.raises(ValidationError, match="allowed_domains"):
        Settings(sso_providers=_provider(oidc_provider))
    with pytest.raises(ValidationError, match="allow_any_domain"):
        Settings(sso_providers=_provider(oidc_provider, allowed_domains=[]))


@pytest.mark.parametrize(
    "domain", ["", "*.acme.example", "acme.example/x", "a b.example", "acme..example", "-a.ex"]
)
def test_a_domain_that_is_no_domain_is_refused(oidc_provider: Provider, domain: str) -> None:
    with pytest.raises(ValidationError, match="allowed_domains"):
        Settings(sso_providers=_provider(oidc_provider, allowed_domains=[domain]))


def test_domains_are_compared_in_lower_case(oidc_provider: Provider) -> None:
    configured = Settings(
        sso_providers=_provider(oidc_provider, allowed_domains=[" @ACME.Example ", "b.example"])
    )
    assert configured.sso_providers[0].allowed_domains == ["acme.example", "b.example"]
    assert configured.sso_providers[0].allow_any_domain is False
