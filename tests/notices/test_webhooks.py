"""Webhook channels against hostile URLs and receivers: inside addresses in every
spelling (IPv4 and IPv6), host names no resolver can encode, IPv6 literals, receivers
that answer with bombs, redirects, silence, trickles or odd Retry-After values. A URL
is refused when it is made and when it is sent to; a receiver's answer is never held
whole, followed elsewhere or waited on past the deadline.

In process (the app and a real PostgreSQL, real receivers on loopback).
"""

from __future__ import annotations

import json
import socket
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from board.notices.senders import RESPONSE_KEPT, post_json
from tests.board.builders import make_tenant
from tests.notices.helpers import (
    add_channel,
    deliver_until,
    deliveries,
    notices_of,
)
from tests.notices.receivers import HttpReceiver

MIB = 1024 * 1024


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
