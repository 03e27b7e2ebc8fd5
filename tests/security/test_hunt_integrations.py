"""Integrations under hostile input: webhook receivers, mail, calendar feeds, API tokens.

Each test here either holds or was a bug found by this file and fixed in board/: a
webhook receiver answering a compressed bomb (`Content-Encoding: gzip, gzip`) made the
board decode it whole in memory, and a host name or Linux user with a line break made
every mail about it raise instead of being sent.

In process (the app and a real PostgreSQL, real HTTP and SMTP receivers on loopback),
not the served board: the notice workers are driven directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from board.notices.senders import RESPONSE_KEPT, post_json
from board.settings import Settings
from board.stream.hub import Sample, StreamHub
from tests.board.builders import enroll, make_tenant
from tests.board.db import execute, scalar
from tests.http_servers import QuietHTTPServer
from tests.notices.conftest import notice_settings
from tests.notices.helpers import (
    add_channel,
    deliver_until,
    deliveries,
    link_alice,
    notices_of,
    series,
    start_of_run,
)
from tests.notices.receivers import HttpReceiver, SmtpReceiver

MIB = 1024 * 1024


@pytest.fixture
def smtp() -> Iterator[SmtpReceiver]:
    receiver = SmtpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture
def settings(database_url: str, tmp_path: Path, smtp: SmtpReceiver) -> Settings:
    return notice_settings(database_url, tmp_path / "data", smtp.url)


# ---- webhook receivers that answer badly ------------------------------------------------


def _gzip(chunks: Iterator[bytes]) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return b"".join(packer.compress(c) for c in chunks) + packer.flush()


class RawAnswer:
    """A loopback HTTP server that reads one request and answers with `head` and `body`
    written at once, exactly as given."""

    def __init__(self, head: bytes, body: bytes) -> None:
        self.answer = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = int(self.sock.getsockname()[1])
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(30)
            seen = b""
            while b"\r\n\r\n" not in seen:
                got = conn.recv(65536)
                if not got:
                    return
                seen += got
            head, _, body = seen.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(body) < length:
                got = conn.recv(65536)
                if not got:
                    return
                body += got
            conn.sendall(self.answer)

    def close(self) -> None:
        self.sock.close()
        self.thread.join(timeout=30)


async def test_a_compressed_bomb_from_a_receiver_is_never_decoded_whole() -> None:
    # 64 MiB of zeros, gzipped twice: about a kilobyte on the wire. Decoded as the
    # receiver asks, one read of the answer became one 64 MiB string in the board.
    bomb = _gzip(iter([_gzip(b"\0" * MIB for _ in range(64))]))
    assert len(bomb) < 4096
    server = RawAnswer(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip, gzip\r\n",
        bomb,
    )
    try:
        tracemalloc.start()
        try:
            outcome = await post_json(
                f"http://127.0.0.1:{server.port}/hook",
                b'{"type":"test"}',
                {},
                allow_insecure=True,
                timeout=10.0,
            )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        server.close()
    assert outcome.delivered, outcome
    assert len(outcome.response) <= RESPONSE_KEPT
    assert peak < 8 * MIB, f"reading a {len(bomb)}-byte answer took {peak // MIB} MiB"


# ---- mail ----------------------------------------------------------------------------


async def test_a_host_name_with_line_breaks_is_mailed_on_one_subject_line(
    app: Any, client: Any, smtp: SmtpReceiver
) -> None:
    """A host names itself; a CR/LF (or any other line break Python's mail headers
    refuse) in the name made every mail about its GPUs raise and never be sent. Now the
    mail goes out, with one Subject line and no header of the name's making."""
    acme = await make_tenant(app, "acme")
    hostile = "node-a\r\nBcc: evil@attacker.example\u2028X-Evil: 1\x85"
    agent = (await enroll(client, acme, hostile))["agentToken"]
    await link_alice(client, acme)
    await add_channel(client, acme, kind="email", emails=["ops@acme.example"])
    last = await series(client, agent, start_of_run(), 31, "idle_held")
    await notices_of(app).detect_once(last)

    async def mailed() -> bool:
        return len(smtp.messages) == 2

    await deliver_until(app, mailed, "the idle-held mails to the member and the channel")
    assert sorted(row[4] for row in await deliveries(app)) == ["delivered", "delivered"]
    for rcpt, message in smtp.messages:
        assert "evil@attacker.example" not in rcpt
        assert message["Bcc"] is None
        assert message["X-Evil"] is None
        subject = re.sub(r"\r?\n[ \t]", " ", str(message["Subject"]))  # unfolded
        assert "node-a" in subject
        assert not any(c in subject for c in "\r\n\x85\u2028"), repr(subject)


# ---- single sign-on: a provider whose ID token does not hold ------------------------------


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


# ---- webhook URLs that no resolver can take ----------------------------------------------

UNENCODABLE_HOSTS = [
    "a" * 64 + ".example",  # a label over 63 characters
    "a..example",  # an empty label
    ".example",
    "\uff0e\uff0e",  # full-width dots: empty labels once folded
    "\u3002",
    "\ud800.example",  # a lone surrogate (JSON can carry one)
    "a" * 300,
]


@pytest.mark.parametrize("host", UNENCODABLE_HOSTS)
async def test_a_webhook_host_name_no_resolver_can_encode_is_422(
    app: Any, client: Any, host: str
) -> None:
    """The name went to getaddrinfo, whose IDNA step raised UnicodeError: a 500 on the
    channel API, and at delivery an "Internal error." retried ten times."""
    acme = await make_tenant(app, "acme")
    url = f"/api/v1/workspaces/{acme.slug}/notification-channels"
    for kind in ("webhook", "slack"):
        body = json.dumps({"kind": kind, "url": f"https://{host}/hook"})  # \ud800 escaped
        r = await client.post(
            url, content=body, headers={**acme.auth(), "Content-Type": "application/json"}
        )
        assert r.status_code == 422, (kind, r.status_code, r.text[:300])
        assert isinstance(r.json()["detail"], str)
    assert (await client.get(url, headers=acme.auth())).json()["channels"] == []
    # A channel stored before this rule fails at once, with a sentence.
    outcome = await post_json(f"https://{host}/hook", b"{}", {}, allow_insecure=False, timeout=5.0)
    assert not outcome.delivered
    assert not outcome.retry
    assert outcome.response


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


async def test_a_receiver_answering_200_with_an_odd_retry_after_is_delivered_once(
    app: Any, client: Any
) -> None:
    """A `Retry-After: ²` ("²" counts as a digit, but is no number) raised inside the
    attempt: a 200 was recorded as "Internal error." and the notice sent again and again."""
    acme = await make_tenant(app, "acme")
    receiver = HttpReceiver(headers_out={"Retry-After": "\u00b2"}).start()
    try:
        channel = await add_channel(client, acme, kind="webhook", url=receiver.url)
        receiver.secret = channel["secret"]
        queued = await client.post(
            f"/api/v1/workspaces/acme/notification-channels/{channel['channelId']}/test",
            headers=acme.auth(),
        )
        assert queued.status_code == 202, queued.text

        async def settled() -> bool:
            return [row[4] for row in await deliveries(app)] != ["pending"]

        await deliver_until(app, settled, "the test notice's first attempt")
        for _ in range(3):
            await notices_of(app).deliver_due()
        assert [row[4] for row in await deliveries(app)] == ["delivered"]
        assert len(receiver.received) == 1
        assert receiver.received[0].verified
    finally:
        receiver.stop()


ODD_ADDRESSES = [
    "a)b@acme.example",  # mailed to "a"
    "a<b>@acme.example",  # mailed to "b"
    "a,b@acme.example",  # mailed to "a" and "b"
    "a:b@acme.example",  # a group: mailed to "b@acme.example"
    "(a@acme.example",  # no mail for any address of the channel
    'a@"acme".example',  # the mail library raised
]


@pytest.mark.parametrize("address", ODD_ADDRESSES)
async def test_an_email_channel_refuses_addresses_mail_would_read_otherwise(
    app: Any, client: Any, smtp: SmtpReceiver, address: str
) -> None:
    """Each was accepted (one "@", no spaces), then read by the mail library as another
    address, or none: mail went to someone not listed, or to nobody of the channel."""
    acme = await make_tenant(app, "acme")
    url = f"/api/v1/workspaces/{acme.slug}/notification-channels"
    r = await client.post(
        url,
        json={"kind": "email", "emails": ["ops@acme.example", address]},
        headers=acme.auth(),
    )
    assert r.status_code == 422, (r.status_code, r.text[:300])
    assert isinstance(r.json()["detail"], str)
    assert (await client.get(url, headers=acme.auth())).json()["channels"] == []


async def test_an_address_stored_before_the_rule_is_left_out_not_mailed_elsewhere(
    app: Any, client: Any, smtp: SmtpReceiver
) -> None:
    acme = await make_tenant(app, "acme")
    channel = await add_channel(client, acme, kind="email", emails=["ops@acme.example"])
    await execute(
        app,
        "UPDATE notice_channels SET emails = %s WHERE public_id = %s",
        ["ops@acme.example", *ODD_ADDRESSES],
        channel["channelId"],
    )
    queued = await client.post(
        f"/api/v1/workspaces/acme/notification-channels/{channel['channelId']}/test",
        headers=acme.auth(),
    )
    assert queued.status_code == 202, queued.text

    async def settled() -> bool:
        return [row[4] for row in await deliveries(app)] != ["pending"]

    await deliver_until(app, settled, "the test mail")
    assert [row[4] for row in await deliveries(app)] == ["delivered"]
    assert [m[0] for m in smtp.messages] == [["ops@acme.example"]]


# ---- tokens of one kind where another is due -------------------------------------------


async def test_each_kind_of_token_opens_only_its_own_door(app: Any, client: Any) -> None:
    """A calendar feed token, an agent token and an enrollment token as an API bearer,
    an API token as a feed token or an agent's: each is refused, with a sentence."""
    acme = await make_tenant(app, "acme")
    await make_tenant(app, "bravo")
    host = await enroll(client, acme, "node-a")
    issued = await client.post(
        "/api/v1/workspaces/acme/enrollment-tokens", json={}, headers=acme.auth()
    )
    enrollment = issued.json()["enrollmentToken"]
    feed = await client.post("/api/v1/workspaces/acme/calendar-feed", headers=acme.auth())
    feed_token = parse_qs(urlsplit(feed.json()["feedUrl"]).query)["token"][0]
    pat = acme.admin_token
    for token in (feed_token, host["agentToken"], enrollment):
        for path in ("/api/v1/workspaces/acme/hosts", "/api/v1/me/api-tokens"):
            r = await client.get(path, headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 401, (token[:12], path, r.status_code)
            assert isinstance(r.json()["detail"], str)
    for token in (pat, host["agentToken"], enrollment):
        r = await client.get("/api/v1/calendar/reservations.ics", params={"token": token})
        assert r.status_code == 404, (token[:12], r.status_code)
    for token in (pat, feed_token, enrollment):
        r = await client.post(
            "/agent/v1/observations",
            content=b"{}",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        assert r.status_code == 401, (token[:12], r.status_code)
    # acme's API token on bravo's routes: 404, as if bravo did not exist.
    r = await client.get("/api/v1/workspaces/bravo/notification-channels", headers=acme.auth())
    assert r.status_code == 404
    # A rotated feed token stops at once; the new one works.
    again = await client.post("/api/v1/workspaces/acme/calendar-feed", headers=acme.auth())
    assert again.status_code == 201
    old = await client.get("/api/v1/calendar/reservations.ics", params={"token": feed_token})
    assert old.status_code == 404
    new_token = parse_qs(urlsplit(again.json()["feedUrl"]).query)["token"][0]
    fresh = await client.get("/api/v1/calendar/reservations.ics", params={"token": new_token})
    assert fresh.status_code == 200


INSIDE = [
    "https://127.0.0.1/",
    "https://localhost/",
    "https://[::1]/",
    "https://0.0.0.0/",
    "https://169.254.169.254/latest/meta-data/",
    "https://10.0.0.1/",
    "https://2130706433/",  # 127.0.0.1 as one decimal number
    "https://0x7f.1/",  # hex and a short form
    "https://017700000001/",  # octal
    "https://127.1/",
    "https://[::ffff:127.0.0.1]/",  # IPv4-mapped
    "https://[::ffff:7f00:1]/",
    "https://[::127.0.0.1]/",  # IPv4-compatible (deprecated)
    "https://[64:ff9b::a9fe:a9fe]/",  # NAT64 of the metadata address
    "https://[fe80::1%25eth0]/",  # link-local with a zone
    "https://[fd00:ec2::254]/",  # a cloud's IPv6 metadata address
]


@pytest.mark.parametrize("url", INSIDE)
async def test_every_spelling_of_an_inside_address_is_refused_when_made_and_when_sent(
    url: str,
) -> None:
    from board.errors import Unprocessable
    from board.notices.urls import check_channel_url

    with pytest.raises(Unprocessable, match="private, loopback"):
        await check_channel_url(url, allow_insecure=False)
    outcome = await post_json(url, b"{}", {}, allow_insecure=False, timeout=5.0)
    assert not outcome.delivered
    assert not outcome.retry
    assert "private, loopback" in outcome.response


async def test_redirects_are_not_followed_and_a_silent_or_trickling_receiver_is_bounded() -> None:
    inside = HttpReceiver().start()
    moved = HttpReceiver(script=[307], headers_out={"Location": inside.url}).start()
    silent = HttpReceiver(hold=lambda _: 600.0).start()
    trickle = socket.socket()
    trickle.bind(("127.0.0.1", 0))
    trickle.listen(1)
    stop = threading.Event()

    def drip() -> None:
        conn, _ = trickle.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            while not stop.wait(0.2):  # a byte at a time, well inside the read timeout
                try:
                    conn.sendall(b"x")
                except OSError:
                    return

    threading.Thread(target=drip, daemon=True).start()
    try:
        redirected = await post_json(moved.url, b"{}", {}, allow_insecure=True, timeout=5.0)
        assert not redirected.delivered
        assert not redirected.retry
        assert redirected.status == 307
        assert inside.received == []
        for url in (silent.url, f"http://127.0.0.1:{trickle.getsockname()[1]}/hook"):
            outcome = await post_json(url, b"{}", {}, allow_insecure=True, timeout=1.0)
            assert not outcome.delivered
            assert outcome.retry
            assert "deadline" in outcome.response
    finally:
        stop.set()
        trickle.close()
        for receiver in (inside, moved, silent):
            receiver.stop()


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


async def test_a_slack_urls_path_and_a_webhooks_query_are_in_no_log_line(
    app: Any, client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A Slack incoming-webhook URL is its own credential (the board shows only its
    host), yet httpx logged every delivery's URL at INFO, path and query included."""
    caplog.set_level(logging.INFO)
    # The agent's logging setup (run in-process by the agent's tests, maybe earlier in
    # this worker) quiets httpx to WARNING; this test needs to see what httpx would log.
    caplog.set_level(logging.INFO, logger="httpx")
    acme = await make_tenant(app, "acme")
    receiver = HttpReceiver().start()
    slack_secret = "services/T0000/B0000/SLACKSECRETabcdef123456"
    hook_secret = "hooksecret0123456789abcdef"
    try:
        made = [
            await add_channel(
                client,
                acme,
                kind="slack",
                url=f"http://127.0.0.1:{receiver.port}/{slack_secret}",
            ),
            await add_channel(
                client,
                acme,
                kind="webhook",
                url=f"http://127.0.0.1:{receiver.port}/hook?key={hook_secret}",
            ),
        ]
        for channel in made:
            r = await client.post(
                f"/api/v1/workspaces/acme/notification-channels/{channel['channelId']}/test",
                headers=acme.auth(),
            )
            assert r.status_code == 202, r.text

        async def delivered() -> bool:
            return [row[4] for row in await deliveries(app)] == ["delivered", "delivered"]

        await deliver_until(app, delivered, "both test notices")
    finally:
        receiver.stop()
    assert sorted(r.headers.get("host", "") for r in receiver.received)  # they did arrive
    lines = [record.getMessage() for record in caplog.records]
    assert any("HTTP Request" in line for line in lines), lines  # httpx did log
    leaked = [line for line in lines if slack_secret in line or hook_secret in line]
    assert not leaked, leaked


# ---- an open live stream after its token is revoked --------------------------------------


class AsgiStream:
    """One GET to the app as a raw ASGI call, its body chunks as they are sent (httpx's
    ASGI transport holds a streaming answer until it ends)."""

    def __init__(self, app: Any, path: str, token: str) -> None:
        self.chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.gone = asyncio.Event()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"board.test"),
                (b"authorization", f"Bearer {token}".encode()),
            ],
            "client": ("127.0.0.1", 50000),
            "server": ("board.test", 80),
            "state": {},
        }
        self.task = asyncio.create_task(app(scope, self._receive, self._send))

    async def _receive(self) -> dict[str, Any]:
        if not hasattr(self, "_sent_request"):
            self._sent_request = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            await self.chunks.put(message.get("body", b""))
            if not message.get("more_body", False):
                await self.chunks.put(None)

    async def next_event(self, seconds: float) -> bytes | None:
        """The next chunk that is not a keep-alive comment; None when the stream ended."""
        async with asyncio.timeout(seconds):
            while True:
                chunk = await self.chunks.get()
                if chunk is None or not chunk.startswith(b":"):
                    return chunk

    async def close(self) -> None:
        self.gone.set()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task


@pytest.mark.parametrize("ending", ["token revoked", "member removed"])
async def test_an_open_live_stream_ends_when_its_token_or_membership_does(
    app: Any, client: Any, ending: str
) -> None:
    """docs/security.md: a person whose token leaked must not keep using it after
    revocation or removal. A live stream opened with the token kept streaming samples
    (found here; fixed in board/stream by the stream's owner: re-checked while open)."""
    acme = await make_tenant(app, "acme")
    issued = await client.post("/api/v1/me/api-tokens", json={}, headers=acme.auth("member"))
    assert issued.status_code == 201, issued.text
    token, prefix = issued.json()["apiToken"], issued.json()["tokenPrefix"]
    workspace_id = await scalar(app, "SELECT id FROM workspaces WHERE slug = 'acme'")
    stream = AsgiStream(app, "/api/v1/workspaces/acme/stream", token)
    try:
        hello = await stream.next_event(30)
        assert hello is not None
        assert hello.startswith(b"event: hello"), hello
        if ending == "token revoked":
            r = await client.delete(
                f"/api/v1/me/api-tokens/{prefix}", headers={"Authorization": f"Bearer {token}"}
            )
        else:
            r = await client.delete(
                "/api/v1/workspaces/acme/members/member@acme.example", headers=acme.auth()
            )
        assert r.status_code in (200, 204), r.text
        refused = await client.get(
            "/api/v1/workspaces/acme/stream/latest", headers={"Authorization": f"Bearer {token}"}
        )
        assert refused.status_code == 401
        hub: StreamHub = app.state.runtime.stream
        # A stream may re-check its viewer every few seconds (the host page's does, every
        # 5 s): samples keep coming, and within a generous deadline the stream must end.
        deadline = time.monotonic() + 30
        while True:
            sample = Sample(int(workspace_id), "after-revocation", time.time(), (("G", 7, 1),))
            hub.deliver(sample)
            try:
                if await stream.next_event(1.0) is None:
                    break  # ended
            except TimeoutError:
                pass
            assert time.monotonic() < deadline, f"the stream went on for 30 s after {ending}"
    finally:
        await stream.close()


# ---- calendar feeds --------------------------------------------------------------------


async def test_a_feed_url_of_a_removed_member_stays_dead_when_they_are_added_again(
    app: Any, client: Any
) -> None:
    """Removal made the feed URL a 404 only through the membership join: adding the
    person again (the usual way to cut off a leaked URL, or just a later re-hire) brought
    the old URL back to life."""
    acme = await make_tenant(app, "acme")
    issued = await client.post("/api/v1/workspaces/acme/calendar-feed", headers=acme.auth("member"))
    assert issued.status_code == 201, issued.text
    token = parse_qs(urlsplit(issued.json()["feedUrl"]).query)["token"][0]
    feed = "/api/v1/calendar/reservations.ics"
    assert (await client.get(feed, params={"token": token})).status_code == 200
    members = "/api/v1/workspaces/acme/members"
    removed = await client.delete(f"{members}/member@acme.example", headers=acme.auth())
    assert removed.status_code in (200, 204), removed.text
    assert (await client.get(feed, params={"token": token})).status_code == 404
    again = await client.post(
        members, json={"email": "member@acme.example", "role": "member"}, headers=acme.auth()
    )
    assert again.status_code == 201, again.text
    revived = await client.get(feed, params={"token": token})
    assert revived.status_code == 404, "the old feed URL works again after a re-add"
    # The person's new URL works.
    fresh = await client.post(
        "/api/v1/workspaces/acme/calendar-feed",
        headers={"Authorization": f"Bearer {again.json()['apiToken']}"},
    )
    new_token = parse_qs(urlsplit(fresh.json()["feedUrl"]).query)["token"][0]
    assert (await client.get(feed, params={"token": new_token})).status_code == 200


async def test_a_notice_queued_for_a_member_who_is_then_removed_is_not_mailed(
    app: Any, client: Any, smtp: SmtpReceiver
) -> None:
    """Removal closes the workspace to the person at once; a notice about its GPUs
    queued just before (or a booking of theirs still in force) was mailed to them after."""
    acme = await make_tenant(app, "acme")
    agent = (await enroll(client, acme, "node-a"))["agentToken"]
    await link_alice(client, acme)
    last = await series(client, agent, start_of_run(), 31, "idle_held")
    await notices_of(app).detect_once(last)
    assert [row[3] for row in await deliveries(app)] == ["member@acme.example"]
    removed = await client.delete(
        "/api/v1/workspaces/acme/members/member@acme.example", headers=acme.auth()
    )
    assert removed.status_code in (200, 204), removed.text

    async def settled() -> bool:
        return [row[4] for row in await deliveries(app)] not in (["pending"], ["sending"])

    await deliver_until(app, settled, "the queued mail's attempt")
    assert [row[4] for row in await deliveries(app)] == ["failed"]
    assert smtp.messages == []
    listed = await client.get("/api/v1/workspaces/acme/notifications", headers=acme.auth())
    assert "no longer" in listed.json()["notifications"][0]["response"]


@pytest.mark.parametrize(
    "url",
    [
        "https://[2002:7f00:1::1]/",  # 6to4 of 127.0.0.1
        "https://[2002:a9fe:a9fe::1]/",  # 6to4 of the metadata address
        "https://[2002:a00:1::1]/",  # 6to4 of 10.0.0.1
        "https://[fec0::1]/",  # site-local: the private range IPv6 had first
    ],
)
async def test_ipv6_forms_of_inside_addresses_are_refused_too(url: str) -> None:
    """Python calls these global; each names an inside address (a 6to4 address carries
    its IPv4 address, site-local is private by definition). They were accepted."""
    from board.errors import Unprocessable
    from board.notices.urls import check_channel_url

    with pytest.raises(Unprocessable, match="private, loopback"):
        await check_channel_url(url, allow_insecure=False)
    outcome = await post_json(url, b"{}", {}, allow_insecure=False, timeout=5.0)
    assert not outcome.delivered
    assert not outcome.retry
    # A public IPv4 address behind 6to4 is still a public address.
    assert await check_channel_url("https://[2002:808:808::1]/", allow_insecure=False)


async def test_a_channel_sealed_under_an_old_secret_key_fails_at_once_with_a_reason(
    app: Any, client: Any, settings: Settings
) -> None:
    """docs/notices.md: changing the secret key makes existing channels unusable. Their
    deliveries raised inside the attempt (InvalidTag) and were retried ten times as an
    "Internal error." instead of failing once with a sentence saying what to do."""
    from board.notices import outbox

    acme = await make_tenant(app, "acme")
    receiver = HttpReceiver().start()
    try:
        channel = await add_channel(client, acme, kind="webhook", url=receiver.url)
        queued = await client.post(
            f"/api/v1/workspaces/acme/notification-channels/{channel['channelId']}/test",
            headers=acme.auth(),
        )
        assert queued.status_code == 202, queued.text
        rotated = settings.model_copy(update={"secret_key": "r" * 40 + "-a-new-secret-key"})
        async with app.state.runtime.pool.connection() as conn:
            await conn.set_autocommit(True)
            claimed = await outbox.claim(conn, 8, 60.0)
            assert len(claimed) == 1
            outcome = await outbox.attempt(rotated, claimed[0])
            await conn.set_autocommit(False)
    finally:
        receiver.stop()
    assert not outcome.delivered
    assert not outcome.retry
    assert "secret key" in outcome.response
    assert receiver.received == []


async def test_a_webhook_to_an_ipv6_literal_sends_a_valid_host_header() -> None:
    """An IPv6 literal went out as `Host: ::1:PORT` (RFC 9110: `[::1]:PORT`), which a
    strict receiver answers 400: the notice failed for good."""
    seen: list[bytes] = []
    sock = socket.socket(socket.AF_INET6)
    sock.bind(("::1", 0))
    sock.listen(1)
    port = int(sock.getsockname()[1])

    def serve() -> None:
        conn, _ = sock.accept()
        with conn:
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            seen.append(data)
            host = [line for line in data.split(b"\r\n") if line.lower().startswith(b"host:")][0]
            ok = host.split(b":", 1)[1].strip() == f"[::1]:{port}".encode()
            status = b"200 OK" if ok else b"400 Bad Request"
            conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        outcome = await post_json(
            f"http://[::1]:{port}/hook", b"{}", {}, allow_insecure=True, timeout=10.0
        )
    finally:
        sock.close()
        thread.join(timeout=30)
    assert outcome.delivered, (outcome, seen)
