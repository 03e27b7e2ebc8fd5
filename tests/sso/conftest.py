"""A real OpenID provider (node + oidc-provider, tests/sso/provider) and a board that trusts it.

The provider runs for the whole session on a free loopback port; its one client accepts
the callback of the ASGI test board (http://board.test) and of a real board served on a
port chosen up front (for the browser test).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest

from tests.support.ports import free_port

PROVIDER_DIR = Path(__file__).resolve().parent / "provider"
CLIENT_ID = "gua-board"
CLIENT_SECRET = "test-client-secret-0123456789"
ASGI_BASE = "http://board.test"
CALLBACK = f"{ASGI_BASE}/signin/sso/test/callback"
_FORM_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')
_INPUT = re.compile(r'<input[^>]*type="hidden"[^>]*name="([^"]+)"[^>]*value="([^"]*)"')


@dataclass(frozen=True)
class Provider:
    issuer: str
    live_board_port: int  # the browser test's board listens here (its callback is registered)


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[Provider]:
    node = shutil.which("node")
    if node is None or not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        pytest.skip(
            "the SSO tests need Node and the test provider's packages: "
            "npm ci --prefix tests/sso/provider"
        )
    port, board_port = free_port(), free_port()
    redirects = [
        f"{ASGI_BASE}/signin/sso/test/callback",
        f"http://127.0.0.1:{board_port}/signin/sso/test/callback",
    ]
    env = {
        **os.environ,
        "PORT": str(port),
        "CLIENT_ID": CLIENT_ID,
        "CLIENT_SECRET": CLIENT_SECRET,
        "REDIRECT_URIS": ",".join(redirects),
    }
    process = subprocess.Popen(
        [node, "provider.js"],
        cwd=PROVIDER_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        line = process.stdout.readline()
        while not line.startswith("listening") and time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail("the OpenID provider exited at start-up")
            line = process.stdout.readline()
        assert line.startswith("listening"), "the OpenID provider did not start"
        yield Provider(issuer=f"http://127.0.0.1:{port}", live_board_port=board_port)
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        if process.poll() is None:
            process.kill()


def provider_entry(provider: Provider, **extra: Any) -> dict[str, Any]:
    return {
        "name": "test",
        "display_name": "Test IdP",
        "issuer": provider.issuer,
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        **extra,
    }


def sso_settings(
    base: Any,
    provider: Provider,
    password_signin: bool = True,
    board: dict[str, Any] | None = None,
    **extra: Any,
) -> Any:
    """Settings trusting the test provider; `extra` is its entry's, `board` the board's."""
    from board.settings import Settings

    return Settings(
        database_url=base.database_url,
        data_dir=base.data_dir,
        sso_providers=[provider_entry(provider, **extra)],
        password_signin=password_signin,
        **(board or {}),
    )


@contextlib.asynccontextmanager
async def started_app(configured: Any) -> AsyncIterator[Any]:
    from board.app import create_app

    application = create_app(configured, run_maintenance=False)
    async with application.router.lifespan_context(application):
        yield application


def browser(application: Any, address: str = "127.0.0.1") -> httpx.AsyncClient:
    """A browser of its own (cookies) at a client address of its own."""
    transport = httpx.ASGITransport(app=application, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url=ASGI_BASE)


@pytest.fixture
async def sso_app(settings: Any, oidc_provider: Provider) -> AsyncIterator[Any]:
    # It speaks for acme's own accounts, and new people of joiners.example join acme.
    configured = sso_settings(
        settings,
        oidc_provider,
        allowed_domains=["acme.example", "joiners.example"],
        join_workspace="acme",
    )
    async with started_app(configured) as application:
        yield application


@pytest.fixture
async def sso_client(sso_app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=sso_app)
    async with httpx.AsyncClient(transport=transport, base_url=ASGI_BASE) as client:
        yield client


async def log_in_at_provider(authorize_url: str, login: str, callback_prefix: str) -> str:
    """Drive the provider's own pages (login, then consent) as a browser would; the URL
    it sends the browser back to (the board's callback, with code and state)."""
    async with httpx.AsyncClient(timeout=30) as browser:
        url = authorize_url
        for _ in range(20):
            if url.startswith(callback_prefix):
                return url
            response = await browser.get(url)
            if response.is_redirect:
                url = urljoin(url, response.headers["location"])
                continue
            assert response.status_code == 200, response.text
            action = _FORM_ACTION.search(response.text)
            assert action, response.text
            fields = dict(_INPUT.findall(response.text))
            if fields.get("prompt") == "login":
                fields |= {"login": login, "password": "anything"}
            posted = await browser.post(urljoin(url, action.group(1)), data=fields)
            assert posted.is_redirect, posted.text
            url = urljoin(url, posted.headers["location"])
        raise AssertionError("the provider never sent the browser back")


async def wait_until(condition: Any, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not await condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def started(client: httpx.AsyncClient, next: str = "/") -> str:
    """Start a sign-in with the test provider; the provider's authorization URL."""
    r = await client.get("/signin/sso/test", params={"next": next})
    assert r.status_code == 303, r.text
    location: str = r.headers["location"]
    query = parse_qs(urlsplit(location).query)
    assert query["code_challenge_method"] == ["S256"]
    assert query["code_challenge"]
    assert query["state"]
    assert query["nonce"]
    return location


async def callback_url(client: httpx.AsyncClient, login: str, next: str = "/") -> str:
    """A sign-in started by `client` and passed at the provider as `login`: the callback."""
    return await log_in_at_provider(await started(client, next), login, CALLBACK)
