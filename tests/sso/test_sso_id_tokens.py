"""Single sign-on against a provider (a real one on loopback that signs its ID tokens)
whose answers do not hold: ID tokens with a claim wrong or missing, an email marked
unverified (as a string too) or one that only lower-cases to an account, oversized
discovery documents and token answers; and a person who joins by single sign-on is
audited with their address.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from board.app import create_app
from board.settings import Settings
from tests.board.builders import make_tenant
from tests.board.db import scalar
from tests.http_servers import QuietHTTPServer

MIB = 1024 * 1024


def _gzip(chunks: Iterator[bytes]) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return b"".join(packer.compress(c) for c in chunks) + packer.flush()


class SigningProvider:
    """An OpenID provider on loopback that signs its ID tokens with a real RSA key; each
    test sets the claims (and header) of the next token its token endpoint hands out."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler

        from joserfc.jwk import RSAKey

        self.key = RSAKey.generate_key(2048, parameters={"kid": "k1"})
        self.claims: dict[str, Any] = {}
        self.header: dict[str, Any] = {"alg": "RS256", "kid": "k1"}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, body: Any) -> None:
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.startswith("/.well-known/openid-configuration"):
                    self._answer(
                        {
                            "issuer": stub.issuer,
                            "authorization_endpoint": f"{stub.issuer}/authorize",
                            "token_endpoint": f"{stub.issuer}/token",
                            "jwks_uri": f"{stub.issuer}/jwks",
                        }
                    )
                else:
                    self._answer({"keys": [stub.key.as_dict(private=False)]})

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer(
                    {"access_token": "a", "token_type": "Bearer", "id_token": stub.id_token()}
                )

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def id_token(self) -> str:
        from joserfc import jws

        payload = json.dumps(self.claims).encode()
        if self.header["alg"] == "HS256":  # signed with the RSA key's public numbers
            from joserfc.jwk import OctKey

            modulus = str(self.key.as_dict(private=False)["n"])
            secret = OctKey.import_key(modulus.encode())
            return jws.serialize_compact(self.header, payload, secret, algorithms=["HS256"])
        return jws.serialize_compact(self.header, payload, self.key, algorithms=["RS256"])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def signing_provider() -> Iterator[SigningProvider]:
    provider = SigningProvider()
    yield provider
    provider.close()


@contextlib.asynccontextmanager
async def app_signing_in_with(settings: Settings, issuer: str) -> AsyncIterator[Any]:
    """The app, started, with one provider "stub" at `issuer`."""
    from board.app import create_app

    configured = Settings(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        sso_providers=[
            {
                "name": "stub",
                "display_name": "Stub",
                "issuer": issuer,
                "client_id": "gua-board",
                "client_secret": "stub-client-secret-0123456789",
                "allowed_domains": ["acme.example"],
            }
        ],
    )
    application = create_app(configured, run_maintenance=False)
    async with application.router.lifespan_context(application):
        yield application


def browser_of(application: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=application)
    return httpx.AsyncClient(transport=transport, base_url="http://board.test")


# This module's sso_app: the signing provider above (tests/sso/conftest.py's is the
# real OpenID provider in node).
@pytest.fixture
async def sso_app(settings: Settings, signing_provider: SigningProvider) -> AsyncIterator[Any]:
    async with app_signing_in_with(settings, signing_provider.issuer) as application:
        yield application


def _claims(provider: SigningProvider, nonce: str, changed: dict[str, Any]) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": provider.issuer,
        "aud": "gua-board",
        "sub": "person-1",
        "iat": now,
        "exp": now + 300,
        "nonce": nonce,
        "email": "admin@acme.example",
        "email_verified": True,
    }
    claims.update(changed)
    return {k: v for k, v in claims.items() if v is not None}


ID_TOKENS: dict[str, dict[str, Any]] = {
    "expired": {"exp": -3600, "iat": -7200},
    "not yet valid": {"nbf": 3600},
    "issued in the future": {"iat": 3600},
    "another sign-in's nonce": {"nonce": "nonce-of-another-sign-in"},
    "no nonce": {"nonce": None},
    "another audience": {"aud": "another-client"},
    "two audiences, no azp": {"aud": ["gua-board", "another-client"]},
    "another issuer": {"iss": "https://issuer.example"},
    "no subject": {"sub": None},
    "a subject that is no string": {"sub": {"id": 1}},
    "exp that is no date": {"exp": "tomorrow"},
    "HS256 under the RSA key's id": {"alg": "HS256"},
}


RELATIVE = ("exp", "iat", "nbf")


@pytest.mark.parametrize("case", list(ID_TOKENS))
async def test_an_id_token_that_does_not_hold_is_a_refusal_and_the_state_is_spent(
    sso_app: Any, signing_provider: SigningProvider, case: str
) -> None:
    """Each of these made the callback a 500 (authlib now raises joserfc's errors, and a
    KeyError for an HMAC token under an RSA key id), which also rolled back the spending
    of the pending sign-in. Now: the sign-in page with a sentence, no session, and the
    state cannot be used again."""
    await make_tenant(sso_app, "acme")
    transport = httpx.ASGITransport(app=sso_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as client:
        # The stub signs in the admin first: the same path, with a token that holds.
        for good in (True, False):
            started = await client.get("/signin/sso/stub", params={"next": "/w/acme/"})
            assert started.status_code == 303, started.text
            query = parse_qs(urlsplit(started.headers["location"]).query)
            state, nonce = query["state"][0], query["nonce"][0]
            changed = {} if good else dict(ID_TOKENS[case])
            alg = changed.pop("alg", "RS256")
            now = int(time.time())
            for name in RELATIVE:
                if isinstance(changed.get(name), int):
                    changed[name] += now
            signing_provider.header = {"alg": alg, "kid": "k1"}
            signing_provider.claims = _claims(signing_provider, nonce, changed)
            client.cookies.delete("gua_session")
            reply = await client.get(
                "/signin/sso/stub/callback", params={"state": state, "code": "c"}
            )
            if good:
                assert reply.status_code == 303, reply.text[:500]
                assert reply.headers["location"] == "/w/acme/"
                continue
            assert reply.status_code == 400, (reply.status_code, reply.text[:500])
            assert "refused" in reply.text or "Start again" in reply.text, reply.text[:500]
            assert (await client.get("/w/acme/")).status_code == 303  # not signed in
            again = await client.get(
                "/signin/sso/stub/callback", params={"state": state, "code": "c"}
            )
            assert again.status_code == 400
            assert "already used" in again.text


class BombingProvider(SigningProvider):
    """A provider whose discovery document is a compressed bomb (or just too big)."""

    def __init__(self, encoding: str, body: bytes) -> None:
        super().__init__()
        self.server.RequestHandlerClass.do_GET = self._bomb  # type: ignore[attr-defined]
        self.encoding, self.body = encoding, body

    @staticmethod
    def _bomb(handler: Any) -> None:
        stub = handler.server.stub
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if stub.encoding:
            handler.send_header("Content-Encoding", stub.encoding)
        handler.send_header("Content-Length", str(len(stub.body)))
        handler.end_headers()
        handler.wfile.write(stub.body)


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip, gzip", _gzip(iter([_gzip(b" " * MIB for _ in range(64))]))),
        ("gzip", _gzip(b" " * MIB for _ in range(64))),
        ("", b"{" + b" " * (4 * MIB) + b"}"),
    ],
    ids=["gzip twice", "gzip", "plain"],
)
async def test_a_providers_oversized_discovery_document_is_never_held_whole(
    settings: Settings, encoding: str, body: bytes
) -> None:
    """The discovery document (and key set) were read whole, decoded as the provider
    asked, and only then measured against their 256 KiB bound: a few hundred bytes
    held 64 MiB. Now the read stops at the bound."""
    provider = BombingProvider(encoding, body)
    provider.server.stub = provider  # type: ignore[attr-defined]
    try:
        async with app_signing_in_with(settings, provider.issuer) as application:
            async with browser_of(application) as c:
                tracemalloc.start()
                try:
                    started = await c.get("/signin/sso/stub")
                    _, peak = tracemalloc.get_traced_memory()
                finally:
                    tracemalloc.stop()
    finally:
        provider.close()
    assert started.status_code == 502, (started.status_code, started.text[:300])
    assert "provider" in started.text
    assert peak < 16 * MIB, f"a {len(body)}-byte discovery answer took {peak // MIB} MiB"


class BombingTokenEndpoint(SigningProvider):
    """A provider whose token endpoint answers a compressed bomb (or too big a body)."""

    encoding = ""
    body = b""

    def __init__(self) -> None:
        super().__init__()
        stub = self

        def do_post(handler: Any) -> None:
            handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            if stub.encoding:
                handler.send_header("Content-Encoding", stub.encoding)
            handler.send_header("Content-Length", str(len(stub.body)))
            handler.end_headers()
            handler.wfile.write(stub.body)

        self.server.RequestHandlerClass.do_POST = do_post  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip, gzip", _gzip(iter([_gzip(b" " * MIB for _ in range(64))]))),
        ("gzip", _gzip(b" " * MIB for _ in range(64))),
        ("", b'{"access_token": "a", "token_type": "Bearer", "x": "' + b"y" * (4 * MIB) + b'"}'),
    ],
    ids=["gzip twice", "gzip", "plain"],
)
async def test_a_token_endpoints_oversized_answer_is_never_held_whole(
    settings: Settings, encoding: str, body: bytes
) -> None:
    """authlib read the token endpoint's answer whole, decoded as the provider asked: a
    few hundred bytes held 64 MiB. Now the read stops at the bound, and the sign-in is
    refused with a sentence."""
    provider = BombingTokenEndpoint()
    provider.encoding, provider.body = encoding, body
    try:
        async with app_signing_in_with(settings, provider.issuer) as application:
            async with browser_of(application) as c:
                started = await c.get("/signin/sso/stub")
                assert started.status_code == 303, started.text[:300]
                state = parse_qs(urlsplit(started.headers["location"]).query)["state"][0]
                tracemalloc.start()
                try:
                    reply = await c.get(
                        "/signin/sso/stub/callback", params={"state": state, "code": "c"}
                    )
                    _, peak = tracemalloc.get_traced_memory()
                finally:
                    tracemalloc.stop()
    finally:
        provider.close()
    assert reply.status_code == 400, (reply.status_code, reply.text[:300])
    assert peak < 16 * MIB, f"a {len(body)}-byte token answer took {peak // MIB} MiB"


async def _sign_in_with(
    application: Any, provider: SigningProvider, changed: dict[str, Any]
) -> httpx.Response:
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as client:
        started = await client.get("/signin/sso/stub", params={"next": "/w/acme/"})
        assert started.status_code == 303, started.text
        query = parse_qs(urlsplit(started.headers["location"]).query)
        provider.claims = _claims(provider, query["nonce"][0], changed)
        return await client.get(
            "/signin/sso/stub/callback", params={"state": query["state"][0], "code": "c"}
        )


@pytest.mark.parametrize("verified", ["false", "False", "0"])
async def test_an_email_the_provider_marks_unverified_as_a_string_is_refused(
    sso_app: Any,
    signing_provider: SigningProvider,
    verified: str,
) -> None:
    """Was: an ID token with `"email": "admin@acme.example", "email_verified": "false"`
    (a string, as some providers write booleans) signed in as acme's admin: 303 to
    /w/acme/ with a session. oidc._verified keeps email_verified only when it is a bool
    (a string becomes None, "not said") and account_for refuses only `is False`. Anyone
    who can register that email, unverified, at such a provider takes the account over.
    sso-and-audit.md: "an email the provider marks as not verified is refused"."""
    await make_tenant(sso_app, "acme")
    reply = await _sign_in_with(sso_app, signing_provider, {"email_verified": verified})
    assert reply.status_code == 400, (reply.status_code, reply.headers.get("location"))
    assert "gua_session" not in reply.cookies


async def test_an_email_that_only_lowercases_to_an_account_is_not_that_account(
    sso_app: Any,
    signing_provider: SigningProvider,
) -> None:
    """Was: an ID token whose verified email is "\\u212aate@acme.example" (KELVIN SIGN,
    U+212A, another mailbox than kate@…) signed in as kate@acme.example: oidc._verified
    lower-cases the claim with str.lower(), which maps U+212A to an ASCII "k", and
    find_user then matches the ASCII account. Whoever gets a
    provider to vouch for such an address takes over the account it folds to. Only
    ASCII case may be folded (or an address that changes under Unicode folding refused);
    "KATE@ACME.EXAMPLE" still signs in as kate, which this test checks too."""
    from board.workspaces import service as workspaces

    await make_tenant(sso_app, "acme")
    runtime = sso_app.state.runtime
    async with runtime.sessions() as session:
        workspace = await workspaces.get_workspace(session, "acme")
        await workspaces.add_member(
            session, workspace, "kate@acme.example", "member", "correct-horse-battery"
        )
        await session.commit()
    same = await _sign_in_with(sso_app, signing_provider, {"email": "KATE@ACME.EXAMPLE"})
    assert same.status_code == 303, same.text[:300]
    folded = await _sign_in_with(sso_app, signing_provider, {"email": "\u212aate@acme.example"})
    assert folded.status_code == 400, (folded.status_code, folded.headers.get("location"))
    assert "gua_session" not in folded.cookies


@pytest.fixture
async def joining_app(
    settings: Settings,
    signing_provider: SigningProvider,
) -> AsyncIterator[Any]:
    """The app with a provider that lets new people of acme.example join "acme"."""
    configured = Settings(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        sso_providers=[
            {
                "name": "stub",
                "display_name": "Stub",
                "issuer": signing_provider.issuer,
                "client_id": "gua-board",
                "client_secret": "stub-client-secret-0123456789",
                "allowed_domains": ["acme.example"],
                "join_workspace": "acme",
            }
        ],
    )
    application = create_app(configured, run_maintenance=False)
    async with application.router.lifespan_context(application):
        yield application


async def test_a_person_who_joins_by_single_sign_on_is_audited_with_an_address(
    joining_app: Any,
    signing_provider: SigningProvider,
) -> None:
    """Was: `member.joined`, written when single sign-on makes an account for a new
    person of an allowed domain, was the one entry still recorded without the client's
    address (board/sso/service.py called record_event without it): the audit log showed
    who joined the workspace but not from where, while the sign-in of the same request
    said it."""
    await make_tenant(joining_app, "acme")
    async with browser_of(joining_app) as browser:
        started = await browser.get("/signin/sso/stub", params={"next": "/w/acme/"})
        assert started.status_code == 303, started.text
        query = parse_qs(urlsplit(started.headers["location"]).query)
        signing_provider.claims = _claims(
            signing_provider, query["nonce"][0], {"email": "newcomer@acme.example"}
        )
        r = await browser.get(
            "/signin/sso/stub/callback", params={"state": query["state"][0], "code": "c"}
        )
        assert r.status_code == 303, r.text[:500]
    rows = await scalar(
        joining_app,
        "SELECT json_agg(json_build_array(action, client_address)) FROM audit_events",
    )
    addresses = dict(rows)
    assert "member.joined" in addresses, addresses
    assert addresses == {"member.joined": "127.0.0.1", "signin.succeeded": "127.0.0.1"}
