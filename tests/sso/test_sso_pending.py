"""Sign-ins started and not finished: bounded per client address and in all."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.board.builders import make_tenant
from tests.sso.conftest import Provider, browser, callback_url, sso_settings, started_app


async def _pending(app: Any) -> int:
    async with app.state.runtime.pool.connection() as conn:
        row = await (await conn.execute("SELECT count(*) FROM sso_logins")).fetchone()
    count: int = row[0]
    return count


def _busy(r: httpx.Response) -> None:
    assert r.status_code == 429, (r.status_code, r.text[:300])
    assert 1 <= int(r.headers["Retry-After"]) <= 600
    assert "location" not in r.headers
    assert "gua_sso" not in r.cookies


async def test_starts_from_one_client_are_bounded(settings: Any, oidc_provider: Provider) -> None:
    """Was: every anonymous GET /signin/sso/<name> kept a pending sign-in 10 minutes, with
    no bound: one client could fill the table."""
    configured = sso_settings(
        settings,
        oidc_provider,
        allowed_domains=["acme.example"],
        board={"sso_max_pending_per_address": 3},
    )
    async with started_app(configured) as app:
        await make_tenant(app, "acme")
        async with browser(app, "203.0.113.7") as flood:
            for _ in range(3):
                assert (await flood.get("/signin/sso/test")).status_code == 303
            for _ in range(5):
                r = await flood.get("/signin/sso/test")
                _busy(r)
                assert 'id="signin-error"' in r.text
                assert "Too many sign-ins started" in r.text
            r = await flood.get("/signin/sso/test", headers={"Accept": "application/json"})
            _busy(r)
            assert isinstance(r.json()["detail"], str)
        assert await _pending(app) == 3
        # The same /64 of IPv6 is one client (one host holds all its addresses).
        for address in ("2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::3"):
            async with browser(app, address) as six:
                assert (await six.get("/signin/sso/test")).status_code == 303
        async with browser(app, "2001:db8:1:2:abcd::9") as six:
            _busy(await six.get("/signin/sso/test"))
        assert await _pending(app) == 6
        # Another client signs in as usual, and a finished sign-in frees its place.
        async with browser(app, "198.51.100.4") as person:
            for _ in range(2):
                assert (await person.get("/signin/sso/test")).status_code == 303
            r = await person.get(await callback_url(person, "admin@acme.example", "/w/acme/"))
            assert r.status_code == 303, r.text
            assert (await person.get("/w/acme/")).status_code == 200
            assert (await person.get("/signin/sso/test")).status_code == 303
            _busy(await person.get("/signin/sso/test"))


async def test_concurrent_starts_of_one_client_do_not_pass_its_bound(
    settings: Any, oidc_provider: Provider
) -> None:
    configured = sso_settings(
        settings,
        oidc_provider,
        allowed_domains=["acme.example"],
        board={"sso_max_pending_per_address": 3},
    )
    async with started_app(configured) as app, browser(app, "203.0.113.8") as flood:
        answers = await asyncio.gather(*(flood.get("/signin/sso/test") for _ in range(12)))
        assert sorted(r.status_code for r in answers) == [303] * 3 + [429] * 9
        assert await _pending(app) == 3


async def test_pending_starts_are_bounded_in_all(settings: Any, oidc_provider: Provider) -> None:
    configured = sso_settings(
        settings,
        oidc_provider,
        allowed_domains=["acme.example"],
        board={"sso_max_pending_per_address": 3, "sso_max_pending": 4},
    )
    async with started_app(configured) as app:
        for n in range(4):
            async with browser(app, f"192.0.2.{n}") as client:
                assert (await client.get("/signin/sso/test")).status_code == 303
        async with browser(app, "192.0.2.200") as late:
            r = await late.get("/signin/sso/test")
            _busy(r)
            assert "busy" in r.text
        assert await _pending(app) == 4
