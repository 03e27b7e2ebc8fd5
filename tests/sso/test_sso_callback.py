"""The single sign-on callback under a hostile provider answer or hostile parameters
(state, code, error): a refusal page with the text as text, never a 500 and never a
session.

Also attacked, and held (no test of their own): one provider's state on another's
callback, a state from another browser, a replayed state; `next` of //x, /\\x, /%09/x,
tabs and control characters.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest


class _StubProvider:
    """An OpenID provider on loopback whose token endpoint answers each code its own way."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.startswith("/.well-known/openid-configuration"):
                    self._answer(200, json.dumps(stub.discovery()).encode())
                elif self.path.startswith("/jwks"):
                    self._answer(200, b'{"keys": []}')
                else:
                    self._answer(404, b"{}")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(
                    pair.split("=", 1)
                    for pair in self.rfile.read(length).decode().split("&")
                    if "=" in pair
                )
                self._answer(*TOKEN_ANSWERS.get(form.get("code", ""), TOKEN_ANSWERS["invalid"]))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def discovery(self) -> dict[str, str]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


TOKEN_ANSWERS: dict[str, tuple[int, bytes, str]] = {
    "invalid": (400, b'{"error": "invalid_grant"}', "application/json"),
    "html": (200, b"<html><script>alert(1)</script></html>", "text/html"),
    "not-json": (200, b"{nope", "application/json"),
    "no-id-token": (200, b'{"access_token": "a", "token_type": "Bearer"}', "application/json"),
    "bad-id-token": (
        200,
        b'{"access_token": "a", "token_type": "Bearer", "id_token": "a.b.c"}',
        "application/json",
    ),
    "huge-id-token": (
        200,
        json.dumps(
            {"access_token": "a", "token_type": "Bearer", "id_token": "a" * 200_000}
        ).encode(),
        "application/json",
    ),
    "error 500": (500, b"<h1>down</h1>", "text/html"),
    "error with markup": (400, b'{"error": "<script>alert(1)</script>"}', "application/json"),
}


@pytest.fixture
def stub_provider() -> Iterator[_StubProvider]:
    provider = _StubProvider()
    yield provider
    provider.close()


@pytest.fixture
async def sso_board(settings: Any, stub_provider: _StubProvider) -> Any:
    from board.app import create_app
    from board.settings import Settings

    configured = Settings(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        sso_providers=[
            {
                "name": "stub",
                "display_name": "Stub <b>IdP</b>",
                "issuer": stub_provider.issuer,
                "client_id": "gua-board",
                "client_secret": "stub-client-secret-0123456789",
                "allowed_domains": ["acme.example"],
            }
        ],
    )
    application = create_app(configured, run_maintenance=False)
    async with application.router.lifespan_context(application):
        yield application


async def _sso_start(client: httpx.AsyncClient, next: str = "/") -> str:
    started = await client.get("/signin/sso/stub", params={"next": next})
    assert started.status_code == 303, started.text
    from urllib.parse import parse_qs

    state = parse_qs(urlsplit(started.headers["location"]).query)["state"][0]
    assert client.cookies.get("gua_sso"), "no browser cookie for the pending sign-in"
    return state


def _sso_refused(reply: httpx.Response) -> None:
    assert reply.status_code in (400, 422), (reply.status_code, reply.text[:300])
    assert "<script>alert(1)" not in reply.text, reply.text
    assert "<b>IdP</b>" not in reply.text, "the provider's display name is markup"
    assert "stub-client-secret" not in reply.text


@pytest.mark.parametrize("code", [c for c in TOKEN_ANSWERS if c != "invalid"] + ["invalid"])
async def test_sso_callback_with_a_hostile_provider_answer(sso_board: Any, code: str) -> None:
    transport = httpx.ASGITransport(app=sso_board)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as client:
        state = await _sso_start(client, next="//evil.example/")
        reply = await client.get("/signin/sso/stub/callback", params={"state": state, "code": code})
        _sso_refused(reply)
        assert 'value="//evil.example/"' not in reply.text
        # The pending sign-in was used up: the same state again is refused too.
        again = await client.get("/signin/sso/stub/callback", params={"state": state, "code": code})
        _sso_refused(again)


CALLBACK_PARAMS: list[dict[str, str]] = [
    {"state": '"><script>alert(1)</script>', "code": "x"},
    {"state": "s" * 1999, "code": "x"},
    {"state": "s" * 5000, "code": "x"},
    {"code": "x"},
    {"state": "", "code": ""},
    {"state": "x", "code": "c" * 5000},
    {"state": "x", "error": "<script>alert(1)</script>"},
    {"state": "x", "error": "e" * 5000},
    {"state": "\u202e", "error": "\u202e<script>alert(1)</script>"},
]


@pytest.mark.parametrize("params", CALLBACK_PARAMS)
async def test_sso_callback_hostile_params(sso_board: Any, params: dict[str, str]) -> None:
    transport = httpx.ASGITransport(app=sso_board)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as client:
        await _sso_start(client)
        _sso_refused(await client.get("/signin/sso/stub/callback", params=params))


async def test_sso_error_of_a_real_pending_sign_in_is_text(sso_board: Any) -> None:
    """The provider's `error` is shown on the page (after a valid state): as text."""
    transport = httpx.ASGITransport(app=sso_board)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as client:
        state = await _sso_start(client)
        reply = await client.get(
            "/signin/sso/stub/callback",
            params={"state": state, "error": '"><script>alert(1)</script>'},
        )
        _sso_refused(reply)
        assert "&lt;script&gt;" in reply.text or "&#34;&gt;&lt;script" in reply.text
        # Another browser (no gua_sso cookie) with a real state gets nothing either.
        state = await _sso_start(client)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as other:
        reply = await other.get("/signin/sso/stub/callback", params={"state": state, "code": "x"})
        _sso_refused(reply)
        assert "another browser" in reply.text
