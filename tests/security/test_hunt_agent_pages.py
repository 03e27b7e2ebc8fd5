"""An attacker's second pass at the agent endpoints and the web pages.

Agent side: Authorization headers in every odd spelling, compressed bodies the board was
never promised (Content-Encoding, gzip bombs), Content-Length lies on a raw socket, JSON
oddities in the claim (NaN, duplicated keys, deep nesting, huge numbers) and hostile names
a host may report. Pages: every form field of every page form (found by route discovery)
with a NUL character, a 1 MB value or repeated; multipart instead of urlencoded; garbage
and duplicated cookies; a session on another workspace's pages; X-Forwarded-* headers;
hostile names (host, Linux user, process, GPU, team, member, booking note) escaped on every
page that renders them. Each: a 4xx with a string detail (or an HTML error page), nothing
changed, never a 500.
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import json
import socket
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest

from tests.security.conftest import World, db
from tests.security.routes import Endpoint, discover
from tests.security.seed import (
    Host,
    Person,
    Tenant,
    add_member,
    claim,
    enroll,
    issue_enrollment,
    new_password,
    observation,
    push,
    unique,
)
from tests.support.live import LiveBoard, measure_peaks
from tests.support.replies import Reply, csrf_of

BOMB_PEAK_MIB = 200


def refused(reply: Reply, *statuses: int) -> str:
    assert reply.status_code in statuses, reply
    return reply.detail()


def not_a_crash(reply: Reply) -> None:
    """A 4xx (or a redirect) with a JSON string detail or an HTML page; never a 5xx."""
    assert reply.status_code < 500, reply
    assert "Internal Server Error" not in reply.text, reply
    if reply.status_code >= 400 and "json" in reply.headers.get("content-type", ""):
        reply.detail()


def count(board: LiveBoard, sql: str, *args: object) -> int:
    value = db(board.env["GUA_BOARD_DATABASE_URL"], sql, *args)
    assert isinstance(value, int), value
    return value


@pytest.fixture(scope="module")
def admin(board: LiveBoard, scratch: Tenant) -> Person:
    """An admin of the scratch workspace with a password, for page sessions."""
    email = f"{unique('hunt-admin')}@charlie.example"
    password = new_password(board)
    reply = add_member(board, scratch.slug, scratch.admin.token, email, "admin", password)
    assert reply.status_code == 201, reply
    return Person(email, password, reply.json()["apiToken"], "admin")


@pytest.fixture
def host(board: LiveBoard, scratch: Tenant) -> Host:
    return enroll(board, scratch, unique("hunt"))


# ---- agent: who is calling -----------------------------------------------------------------


def _auth_forms(host: Host, pat: str, enrollment: str) -> dict[str, tuple[str, bool]]:
    """Authorization values and whether each is the host's own token (accepted)."""
    t = host.token
    return {
        "no scheme": (t, False),
        "two tokens": (f"Bearer {t} {t}", False),
        "two headers' worth joined": (f"Bearer {t}, Bearer {t}", False),
        # RFC 9110: the scheme is case-insensitive; extra spaces before the token are fine.
        "lowercase bearer": (f"bearer {t}", True),
        "uppercase bearer": (f"BEARER {t}", True),
        "two spaces": (f"Bearer  {t}", True),
        "tab": (f"Bearer\t{t}", False),
        "10 KB token": ("Bearer gua_agent_" + "a" * 10_000, False),
        "10 KB after the real one": (f"Bearer {t}{'a' * 10_000}", False),
        "a personal API token": (f"Bearer {pat}", False),
        "an enrollment token": (f"Bearer {enrollment}", False),
        "the token prefix only": (f"Bearer {host.prefix}", False),
        "Basic": ("Basic Z3VhOmd1YQ==", False),
        "scheme only": ("Bearer", False),
        "Token scheme": (f"Token {t}", False),
        "latin-1 bytes": ("Bearer gua_agent_\u00e9\u00ff", False),
    }


def test_authorization_header_forms(board: LiveBoard, scratch: Tenant, host: Host) -> None:
    enrollment = issue_enrollment(board, scratch)
    problems = []
    body = json.dumps(observation()).encode()
    for label, (value, accepted) in _auth_forms(host, scratch.admin.token, enrollment).items():
        headers = {"Authorization": value.encode("latin-1")}
        with board.client() as c:
            replies = [
                board.call(
                    c,
                    "POST",
                    "/agent/v1/observations",
                    content=body,
                    headers={**headers, "Content-Type": "application/json"},
                ),
                board.call(c, "GET", "/agent/v1/archives", headers=headers),
                board.call(c, "DELETE", "/agent/v1/archives?olderThanDays=400", headers=headers),
            ]
        for reply in replies:
            ok = reply.status_code in (200, 202) if accepted else reply.status_code == 401
            if not ok:
                problems.append(f"{label}: {reply}")
            elif not accepted:
                assert reply.headers.get("www-authenticate") == "Bearer", reply.headers
                assert "agent token" in reply.detail(), reply
    assert not problems, "\n".join(problems)
    # The enrollment token was not spent by being shown as a bearer value.
    assert claim(board, enrollment, unique("after-bearer")).host_id


def test_a_revoked_host_token_opens_nothing(board: LiveBoard, scratch: Tenant, host: Host) -> None:
    with board.client(scratch.admin.token) as c:
        revoked = board.call(
            c, "POST", f"/api/v1/workspaces/{scratch.slug}/hosts/{host.host_id}/revoke"
        )
    assert revoked.status_code == 200, revoked
    with board.client(host.token) as c:
        for method, path in (
            ("GET", "/agent/v1/archives"),
            ("DELETE", "/agent/v1/archives?olderThanDays=1"),
            ("POST", "/agent/v1/archives?date=2026-01-01&table=gpu_sample"),
        ):
            refused(board.call(c, method, path, content=b"x"), 401)
    refused(push(board, host, observation()), 401)


# ---- agent: bodies the board never promised to read -----------------------------------------


def _gzip_bomb(mib: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b" " * (1024 * 1024)
    parts = [compressor.compress(b'{"a": "')]
    parts += [compressor.compress(chunk) for _ in range(mib)]
    parts.append(compressor.compress(b'"}') + compressor.flush())
    return b"".join(parts)


ENCODED: dict[str, Callable[[bytes], bytes]] = {
    "gzip": lambda body: gzip.compress(body),
    "deflate": lambda body: zlib.compress(body),
    "br": lambda body: b"\x1b\x00\x00\x00" + body[:10],
    "gzip, gzip": lambda body: gzip.compress(gzip.compress(body)),
    "x-unknown": lambda body: body[::-1],
}


@pytest.mark.parametrize("encoding", list(ENCODED))
def test_compressed_observations_are_not_json(board: LiveBoard, host: Host, encoding: str) -> None:
    """The board reads no Content-Encoding: a compressed body is simply not JSON (400)."""
    before = count(board, "SELECT count(*) FROM host_observations")
    body = ENCODED[encoding](json.dumps(observation()).encode())
    reply = push(board, host, body, headers={"Content-Encoding": encoding})
    assert "JSON" in refused(reply, 400, 415), reply
    assert count(board, "SELECT count(*) FROM host_observations") == before


def test_a_gzip_bomb_as_content_encoding_costs_nothing(board: LiveBoard, host: Host) -> None:
    bomb = _gzip_bomb(512)
    assert len(bomb) < 1024 * 1024, len(bomb)
    with measure_peaks(board) as peaks:
        reply = push(board, host, bomb, headers={"Content-Encoding": "gzip"})
        with board.client() as c:
            claimed = board.call(
                c,
                "POST",
                "/agent/v1/enrollments/claim",
                content=_gzip_bomb(64)[: 60 * 1024],
                headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
            )
    refused(reply, 400)
    refused(claimed, 400)
    assert peaks.worst_mib < BOMB_PEAK_MIB, f"a worker grew by {peaks.worst_mib:.0f} MiB"


def _raw(board: LiveBoard, request: bytes, *, half_close: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", board.port), timeout=60) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return answer


def _statuses(answer: bytes) -> list[bytes]:
    return [line.split(b" ", 2)[1] for line in answer.split(b"\r\n") if line.startswith(b"HTTP/1.")]


def test_content_length_lies(board: LiveBoard, host: Host) -> None:
    body = json.dumps(observation()).encode()
    head = (
        b"POST /agent/v1/observations HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer " + host.token.encode() + b"\r\n"
        b"Content-Type: application/json\r\n"
    )
    cases = {
        # Says more than it sends, then stops sending.
        "longer": head + f"Content-Length: {len(body) + 500}\r\n\r\n".encode() + body,
        # Says less: the JSON is cut (400), the rest is a broken second request (400).
        "shorter": head + f"Content-Length: {len(body) // 2}\r\n\r\n".encode() + body,
        "negative": head + b"Content-Length: -1\r\n\r\n" + body,
        "not a number": head + b"Content-Length: 1e3\r\n\r\n" + body,
        "two values": head + f"Content-Length: {len(body)}, 5\r\n\r\n".encode() + body,
        "and chunked": head
        + f"Content-Length: {len(body)}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\n\r\n",
        "bad chunk size": head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body,
        "huge chunk size": head + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{}",
    }
    before = count(board, "SELECT count(*) FROM host_observations")
    problems = []
    for label, request in cases.items():
        answer = _raw(board, request)
        statuses = _statuses(answer)
        if any(s.startswith(b"5") or s.startswith(b"2") for s in statuses):
            problems.append(f"{label}: {answer[:300]!r}")
    assert not problems, "\n".join(problems)
    assert count(board, "SELECT count(*) FROM host_observations") == before


# ---- agent: the claim's JSON ---------------------------------------------------------------


def _claim_bodies(token: str) -> dict[str, bytes]:
    ok = json.dumps({"enrollmentToken": token, "hostname": "h"})
    return {
        "NaN": b'{"enrollmentToken": NaN}',
        "Infinity hostname": ok.replace('"h"', "Infinity").encode(),
        "huge number": ok.replace('"h"', "9" * 5000).encode(),
        "deep nesting": ok[:-1].encode() + b', "x": ' + b"[" * 30_000 + b"]" * 30_000 + b"}",
        "token twice, the second bogus": ok.replace(
            '"hostname"', '"enrollmentToken": "gua_enroll_00000000_x", "hostname"'
        ).encode(),
        "token as a number": b'{"enrollmentToken": 12345}',
        "token as a list": json.dumps({"enrollmentToken": [token]}).encode(),
        "NUL in hostname": ok.replace('"h"', '"a\\u0000b"').encode(),
        "lone surrogate hostname": ok.replace('"h"', '"\\udc00"').encode(),
        "10 KB hostname": ok.replace('"h"', json.dumps("h" * 10_000)).encode(),
        "BOM before the JSON": b"\xef\xbb\xbf" + ok.encode(),
        "UTF-16": ok.encode("utf-16"),
        "trailing garbage": ok.encode() + b"}{",
        "a JSON null": b"null",
        "10 KB token": json.dumps({"enrollmentToken": "gua_enroll_" + "a" * 10_000}).encode(),
    }


def test_odd_claim_bodies(board: LiveBoard, scratch: Tenant) -> None:
    token = issue_enrollment(board, scratch)
    problems = []
    with board.client() as c:
        for label, body in _claim_bodies(token).items():
            reply = board.call(
                c,
                "POST",
                "/agent/v1/enrollments/claim",
                content=body,
                headers={"Content-Type": "application/json"},
            )
            if reply.status_code == 201:  # only a body naming the token once may win
                board.remember(reply.json()["agentToken"])
                problems.append(f"{label}: claimed")
            elif reply.status_code not in (400, 401, 413, 422):
                problems.append(f"{label}: {reply}")
            else:
                reply.detail()
    assert not problems, "\n".join(problems)
    # None of them spent the token.
    assert claim(board, token, unique("after-odd-claims")).host_id


# ---- pages: every form field, hostile ---------------------------------------------------------


@dataclass
class PageTargets:
    tenant: Tenant
    admin: Person
    host: Host
    enrollment_prefix: str


@pytest.fixture(scope="module")
def page_targets(board: LiveBoard, scratch: Tenant, admin: Person) -> PageTargets:
    host = enroll(board, scratch, unique("form-host"))
    name = unique("form-pending")
    issue_enrollment(board, scratch, name)
    with board.client(scratch.admin.token) as c:
        listed = board.call(c, "GET", f"/api/v1/workspaces/{scratch.slug}/enrollment-tokens")
    prefix = next(
        t["tokenPrefix"] for t in listed.json()["enrollmentTokens"] if t["displayName"] == name
    )
    return PageTargets(scratch, admin, host, prefix)


@pytest.fixture(scope="module")
def page_posts(board: LiveBoard, tmp_path_factory: pytest.TempPathFactory) -> list[Endpoint]:
    with board.client() as c:
        schema = board.call(c, "GET", "/openapi.json").json()
    found = discover(
        schema, tmp_path_factory.mktemp("hunt-forms"), board.env["GUA_BOARD_DATABASE_URL"]
    )
    posts = [e for e in found if e.is_page and e.method == "POST"]
    assert len(posts) >= 10, posts
    return posts


# Fields some handlers read from request.form() by hand (not in the route's signature).
EXTRA_FIELDS = ("timezone", "retentionDays", "staleAfterSeconds", "events", "gpus")
# Posts that end the session they come from: checked last, each on its own sign-in.
ENDS_SESSION = ("/signout", "/account/sign-out-everywhere", "/account/password")


def _url(endpoint: Endpoint, t: PageTargets) -> str:
    values = {
        "slug": t.tenant.slug,
        "host_id": t.host.host_id,
        "email": f"nobody-{unique('x')}@charlie.example",
        "prefix": t.enrollment_prefix,
        "token_prefix": t.enrollment_prefix,
    }
    path = endpoint.path
    for name in endpoint.path_params:
        path = path.replace(f"{{{name}}}", quote(values.get(name, t.host.host_id), safe=""))
    return path


def _base_form(t: PageTargets) -> dict[str, str]:
    start = (datetime.now(UTC) + timedelta(days=3)).replace(second=0, microsecond=0)
    return {
        "workspace": t.tenant.slug,
        "host": t.host.host_id,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=1)).isoformat(),
        "kind": "webhook",
        "role": "member",
    }


HOSTILE_VALUES = {
    "NUL": "a\x00b",
    "1 MB": "x" * 1_000_000,
    "C0 controls": "\x01\x1b[31m\x7f\r\n",
    "RTL override": "\u202egpj.exe",
    "lone surrogate percent-encoded": "%ED%A0%80",
    "markup": '"><script>alert(1)</script>',
}


def away(n: int) -> dict[str, str]:
    """A client address of its own behind the trusted proxy (a documentation range): the
    sign-in form's hostile posts are failed sign-ins, and counted on 127.0.0.1 they would
    pass the per-address limit and lock every later test's sign-in out (429)."""
    return {"X-Forwarded-For": f"198.51.100.{n}"}


@pytest.mark.parametrize("value", list(HOSTILE_VALUES))
def test_every_form_field_hostile(
    board: LiveBoard, page_targets: PageTargets, page_posts: list[Endpoint], value: str
) -> None:
    """Each field of each page form (the CSRF token right) holding a hostile value."""
    t = page_targets
    hostile = HOSTILE_VALUES[value]
    problems = []
    members_before = count(board, "SELECT count(*) FROM memberships")
    with board.signed_in(t.admin.email, t.admin.password) as c:
        csrf = board.csrf(c, "/account")
        for endpoint in page_posts:
            if endpoint.path in ENDS_SESSION:
                continue
            url = _url(endpoint, t)
            for field in sorted({*endpoint.form, *EXTRA_FIELDS} - {"csrf_token"}):
                data = {**_base_form(t), field: hostile, "csrf_token": csrf}
                address = away(list(HOSTILE_VALUES).index(value) + 1)
                if value == "lone surrogate percent-encoded":
                    raw = "&".join(
                        f"{quote(k)}={v if k == field else quote(v)}" for k, v in data.items()
                    )
                    reply = board.call(
                        c,
                        "POST",
                        url,
                        content=raw.encode(),
                        headers={"Content-Type": "application/x-www-form-urlencoded", **address},
                    )
                else:
                    reply = board.call(c, "POST", url, data=data, headers=address)
                if reply.status_code >= 500 or "Internal Server Error" in reply.text:
                    problems.append(f"POST {url} {field}={value}: {reply}")
                if "<script>alert(1)" in reply.text:
                    problems.append(f"POST {url} {field}={value}: markup reflected")
        assert board.call(c, "GET", "/account").status_code == 200, "the session ended"
    assert not problems, "\n".join(problems)
    # Nothing hostile was stored: no member, no over-long enrollment token name.
    assert count(board, "SELECT count(*) FROM memberships") == members_before
    assert (
        count(board, "SELECT count(*) FROM enrollment_tokens WHERE length(display_name) > 255") == 0
    )


@pytest.mark.parametrize("path", ENDS_SESSION)
def test_session_ending_forms_with_hostile_fields(
    board: LiveBoard, page_targets: PageTargets, path: str
) -> None:
    t = page_targets
    for value in ("NUL", "1 MB"):
        with board.signed_in(t.admin.email, t.admin.password) as c:
            csrf = board.csrf(c, "/account")
            data = {
                "csrf_token": csrf,
                "current_password": HOSTILE_VALUES[value],
                "new_password": HOSTILE_VALUES[value],
            }
            not_a_crash(board.call(c, "POST", path, data=data))
    # The password did not change.
    with board.client() as c:
        assert board.sign_in(c, t.admin.email, t.admin.password).status_code == 303


def test_enrollment_display_name_with_nul(board: LiveBoard, page_targets: PageTargets) -> None:
    """Was a 500: the page's display name went to PostgreSQL with its NUL."""
    t = page_targets
    before = count(board, "SELECT count(*) FROM enrollment_tokens")
    with board.signed_in(t.admin.email, t.admin.password) as c:
        csrf = board.csrf(c, f"/w/{t.tenant.slug}/admin")
        page = board.call(
            c,
            "POST",
            f"/w/{t.tenant.slug}/admin/enrollment-tokens",
            data={"csrf_token": csrf, "display_name": "gpu\x00node"},
        )
    assert page.status_code == 422, page
    assert "NUL" in page.text, page
    with board.client(t.tenant.admin.token) as c:
        api = board.call(
            c,
            "POST",
            f"/api/v1/workspaces/{t.tenant.slug}/enrollment-tokens",
            json={"displayName": "gpu\x00node"},
        )
    refused(api, 422)
    assert count(board, "SELECT count(*) FROM enrollment_tokens") == before


def test_api_token_form_naming_a_workspace_with_nul(
    board: LiveBoard, page_targets: PageTargets
) -> None:
    """Was a 500: the account page's workspace field was looked up with its NUL."""
    t = page_targets
    before = count(board, "SELECT count(*) FROM api_tokens")
    with board.signed_in(t.admin.email, t.admin.password) as c:
        csrf = board.csrf(c, "/account")
        for path in ("/account/api-tokens", "/account/api-tokens/gua_pat_00000000/revoke"):
            reply = board.call(c, "POST", path, data={"csrf_token": csrf, "workspace": "a\x00b"})
            assert reply.status_code == 404, reply
    assert count(board, "SELECT count(*) FROM api_tokens") == before


@pytest.mark.parametrize(
    "form",
    [
        {"kind": "webhook", "url": ""},
        {"kind": "email", "emails": "not-an-address"},
        {"kind": "slack", "url": "javascript:alert(1)"},
        {"kind": "webhook", "url": "https://hooks.example/x", "events": "no-such-event"},
    ],
)
def test_a_refused_notice_channel_is_a_page(
    board: LiveBoard, page_targets: PageTargets, form: dict[str, str]
) -> None:
    """Was a 500 for every refusal: the rollback expired the workspace the page reads."""
    t = page_targets
    before = count(board, "SELECT count(*) FROM notice_channels")
    with board.signed_in(t.admin.email, t.admin.password) as c:
        csrf = board.csrf(c, f"/w/{t.tenant.slug}/admin/notices")
        reply = board.call(
            c,
            "POST",
            f"/w/{t.tenant.slug}/admin/notices/channels",
            data={"csrf_token": csrf, **form},
        )
    assert reply.status_code == 422, reply
    assert "text/html" in reply.headers["content-type"], reply
    assert count(board, "SELECT count(*) FROM notice_channels") == before


def test_repeated_and_multipart_fields(board: LiveBoard, page_targets: PageTargets) -> None:
    t = page_targets
    with board.client() as c:
        csrf = board.csrf(c, "/signin")
        # Repeated, the last csrf_token counts: a forged one after the real one is refused,
        # and the real one after a forged one is no forgery (the attacker lacks it).
        for order, status in (((csrf, "forged"), 403), (("forged", csrf), 401)):
            twice = board.call(
                c,
                "POST",
                "/signin",
                content=(
                    f"csrf_token={order[0]}&csrf_token={order[1]}&email=a%40b.example&password=x"
                ).encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded", **away(100)},
            )
            assert twice.status_code == status, (order, twice)
        # A JSON body is no form: 403 (no token), not a 500.
        as_json = board.call(
            c, "POST", "/signin", json={"csrf_token": csrf, "email": "a@b.example"}
        )
        assert as_json.status_code == 403, as_json
        for content_type, body in (
            ("multipart/form-data", b"x"),
            ("multipart/form-data; boundary=x", b"--x\r\nbroken"),
            ("multipart/form-data; boundary=x", b"--x--\r\n"),
            ("application/x-www-form-urlencoded", b"\xff\xfe=\xff&&&==="),
            ("application/x-www-form-urlencoded; charset=utf-16", b"a=b"),
        ):
            reply = board.call(
                c, "POST", "/signin", content=body, headers={"Content-Type": content_type}
            )
            assert reply.status_code in (400, 403), (content_type, body, reply)
        # Multipart with the right token is an ordinary sign-in.
        files = {
            "csrf_token": (None, csrf),
            "email": (None, t.admin.email),
            "password": (None, t.admin.password),
        }
        signed = board.call(c, "POST", "/signin", files=files)
        assert signed.status_code == 303, signed
        # A file where a field belongs is no password.
        csrf = board.csrf(c, "/account")
        upload = board.call(
            c,
            "POST",
            f"/w/{t.tenant.slug}/admin/enrollment-tokens",
            files={"csrf_token": (None, csrf), "display_name": ("x.txt", b"file", "text/plain")},
        )
        not_a_crash(upload)
        assert upload.status_code in (400, 403, 422), upload


# ---- pages: cookies, other workspaces, forwarded headers ------------------------------------


COOKIES = {
    "garbage": b"gua_session=garbage",
    "huge": b"gua_session=" + b"x" * 7000,
    "latin-1 bytes": b"gua_session=\xff\xfe\xe9",
    "quoted": b'gua_session="a\\"b"',
    "no value": b"gua_session",
    "many": b"; ".join(b"c%d=%d" % (i, i) for i in range(500)),
    "dot-separated signature": b"gua_session=a.b.c.d.e",
}


@pytest.mark.parametrize("cookie", list(COOKIES))
def test_garbage_cookies(board: LiveBoard, page_targets: PageTargets, cookie: str) -> None:
    for path in ("/signin", f"/w/{page_targets.tenant.slug}/", "/account"):
        request = (
            f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode()
            + b"Cookie: "
            + COOKIES[cookie]
            + b"\r\n\r\n"
        )
        answer = _raw(board, request, half_close=False)
        statuses = _statuses(answer)
        assert statuses, answer[:300]
        assert statuses[0] in (b"200", b"303", b"400", b"431"), answer[:300]


def test_two_session_cookies(board: LiveBoard, page_targets: PageTargets) -> None:
    """A forged cookie beside the real one: either is read, never both, never a 500."""
    t = page_targets
    with board.signed_in(t.admin.email, t.admin.password) as c:
        real = c.cookies.get("gua_session")
        assert real
        for order in ((real, "forged"), ("forged", real)):
            header = "; ".join(f"gua_session={v}" for v in order)
            with board.client() as other:
                reply = board.call(other, "GET", "/account", headers={"Cookie": header})
            assert reply.status_code in (200, 303), reply


def test_a_session_on_another_workspaces_pages(
    board: LiveBoard, world: World, page_targets: PageTargets
) -> None:
    """Signed in to charlie, on bravo's pages: 404 everywhere, and forms change nothing."""
    t = page_targets
    b = world.b.slug
    members = count(board, "SELECT count(*) FROM memberships")
    tokens = count(board, "SELECT count(*) FROM enrollment_tokens")
    with board.signed_in(t.admin.email, t.admin.password) as c:
        csrf = board.csrf(c, "/account")
        for path in (f"/w/{b}/", f"/w/{b}/admin", f"/w/{b}/people", f"/w/{b}/fleet.json"):
            reply = board.call(c, "GET", path)
            assert reply.status_code == 404, reply
            assert not any(name in reply.text for name in world.b_names), path
        for path, data in (
            (f"/w/{b}/admin/enrollment-tokens", {"display_name": "x"}),
            (f"/w/{b}/admin/members", {"email": "planted@bravo.example", "role": "admin"}),
            (f"/w/{b}/admin/settings", {"staleAfterSeconds": "99"}),
            (f"/w/{b}/admin/hosts/{world.b.hosts[0].host_id}/revoke", {}),
            ("/account/api-tokens", {"workspace": b}),
        ):
            reply = board.call(c, "POST", path, data={"csrf_token": csrf, **data})
            assert reply.status_code == 404, (path, reply)
    assert count(board, "SELECT count(*) FROM memberships") == members
    assert count(board, "SELECT count(*) FROM enrollment_tokens") == tokens
    assert push(board, world.b.hosts[0], observation()).status_code == 202


FORWARDED = {
    "X-Forwarded-Proto": ["javascript", "https, http", "x" * 2000, ""],
    "X-Forwarded-For": ["<script>alert(1)</script>", "999.1.1.1", "::g", "a, b, c" * 300],
    "X-Forwarded-Host": ["evil.example"],
    "Forwarded": ["for=evil;host=evil.example;proto=https"],
    "X-Forwarded-Prefix": ["//evil.example"],
}


def test_forwarded_headers(board: LiveBoard, page_targets: PageTargets) -> None:
    t = page_targets
    problems = []
    for name, values in FORWARDED.items():
        for value in values:
            headers = {name: value}
            with board.client() as c:
                form = board.call(c, "GET", "/signin", headers=headers)
                replies = [form]
                if form.status_code == 200:
                    replies.append(
                        board.call(
                            c,
                            "POST",
                            "/signin",
                            headers=headers,
                            data={
                                "csrf_token": csrf_of(form.text),
                                "email": t.admin.email,
                                "password": t.admin.password,
                                "next": f"/w/{t.tenant.slug}/admin",
                            },
                        )
                    )
                    replies.append(
                        board.call(c, "GET", f"/w/{t.tenant.slug}/admin", headers=headers)
                    )
            for reply in replies:
                location = reply.headers.get("location", "")
                if reply.status_code >= 500 or "evil.example" in location:
                    problems.append(f"{name}: {value[:40]!r}: {reply} {location}")
                if "<script>alert(1)" in reply.text:
                    problems.append(f"{name}: {value[:40]!r}: reflected")
    assert not problems, "\n".join(problems)
    # What a forwarded address wrote into the audit log is text on the audit page.
    with board.signed_in(t.admin.email, t.admin.password) as c:
        audit = board.call(c, "GET", f"/w/{t.tenant.slug}/admin/audit")
    assert audit.status_code == 200, audit
    assert "<script>alert(1)" not in audit.text


@pytest.mark.parametrize(
    "slug", ["//evil.example", "/\\evil.example", "https://evil.example", "..%2F..%2F", "\u202e"]
)
def test_workspace_switch_stays_on_the_board(
    board: LiveBoard, page_targets: PageTargets, slug: str
) -> None:
    t = page_targets
    with board.signed_in(t.admin.email, t.admin.password) as c:
        reply = board.call(c, "GET", "/workspaces/switch", params={"slug": slug})
    assert reply.status_code == 303, reply
    location = reply.headers["location"]
    cleaned = location.replace("\\", "/")
    assert urlsplit(cleaned).netloc == "", location
    assert cleaned.startswith("/w/"), location
    assert not cleaned.startswith("//"), location


# ---- pages: hostile names, rendered ---------------------------------------------------------

MARK = "<b id=hunt>\"onx=1'"
# What must never be in an HTML page: the tag, or a quote that leaves an attribute.
RAW = ("<b id=hunt>", '"onx=1')


@dataclass
class Hostile:
    tenant: Tenant
    host: Host
    member: Person


@pytest.fixture(scope="module")
def hostile(board: LiveBoard, admin: Person, scratch: Tenant) -> Hostile:
    """Every name a page renders, chosen by an attacker: a host (its claim hostname and
    the token's display name), GPU, process, Linux user, team, member email, booking note."""
    t = scratch
    token = issue_enrollment(board, t, "name" + MARK)
    host = claim(board, token, "host" + MARK)
    body = observation(
        # Directory entries take only plain Linux user names; the team is the hostile part.
        users=("user" + MARK, "planthunt"),
        process_names=("proc" + MARK,),
        gpu_names=("gpu" + MARK,),
        gpu_uuids=("GPU-" + MARK,),
    )
    body["host"]["hostname"] = "reported" + MARK
    body["host"]["displayName"] = "shown" + MARK
    at = datetime.now(UTC)
    for when in (at - timedelta(seconds=60), at):
        body["observedAt"] = when.isoformat()
        reply = push(board, host, body)
        assert reply.status_code == 202, reply
    email = '"<b/id=hunt>"@charlie.example'
    made = add_member(board, t.slug, t.admin.token, email, "member", new_password(board))
    member_email = email if made.status_code == 201 else f"{unique('plain')}@charlie.example"
    if made.status_code != 201:
        assert add_member(board, t.slug, t.admin.token, member_email, "member", None).status_code
    base = f"/api/v1/workspaces/{t.slug}"
    start = (datetime.now(UTC) + timedelta(hours=3)).replace(second=0, microsecond=0)
    with board.client(t.admin.token) as c:
        put = board.call(
            c,
            "PUT",
            f"{base}/directory/planthunt",
            json={"memberEmail": None, "team": "team" + MARK.replace("'", "")},
        )
        booked = board.call(
            c,
            "POST",
            f"{base}/reservations",
            json={
                "hostId": host.host_id,
                "start": start.isoformat(),
                "end": (start + timedelta(hours=1)).isoformat(),
                "note": "note" + MARK,
            },
        )
    assert put.status_code < 300, put
    assert booked.status_code == 201, booked
    return Hostile(t, host, Person(member_email, "", "", "member"))


def _pages(h: Hostile) -> list[str]:
    s = f"/w/{h.tenant.slug}"
    host = f"{s}/hosts/{h.host.host_id}"
    return [
        f"{s}/",
        f"{s}/?view=dense",
        f"{s}/?view=map",
        f"{s}/?group=state",
        f"{s}/?group=user",
        f"{s}/?q={quote(MARK)}",
        f"{s}/people",
        host,
        f"{host}?range=24h",
        f"{s}/admin",
        f"{s}/admin/directory",
        f"{s}/admin/directory?saved={quote(MARK)}",
        f"{s}/admin/audit",
        f"{s}/admin/notices",
        f"{s}/reservations",
        f"{s}/reservations?host={h.host.host_id}",
        f"{s}/usage",
        f"{s}/usage?groupBy=user",
        f"{s}/usage?groupBy=team",
        f"{s}/usage?groupBy=host",
        f"{s}/usage?groupBy=gpu",
        f"{s}/usage?groupBy=user,host",
        f"{s}/statements",
        "/account",
    ]


def _fragments(value: Any) -> Iterator[str]:
    """Every string of a JSON answer whose key says it is HTML (fleet.json's fragments)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str) and ("html" in key.lower() or item.lstrip().startswith("<")):
                yield item
            else:
                yield from _fragments(item)
    elif isinstance(value, list):
        for item in value:
            yield from _fragments(item)


def test_hostile_names_are_text_on_every_page(
    board: LiveBoard, admin: Person, hostile: Hostile
) -> None:
    problems = []
    shown = 0
    with board.signed_in(admin.email, admin.password) as c:
        for path in _pages(hostile):
            reply = board.call(c, "GET", path)
            if reply.status_code != 200:
                problems.append(f"{path}: {reply}")
                continue
            for raw in RAW:
                if raw in reply.text:
                    at = reply.text.index(raw)
                    problems.append(f"{path}: raw {raw!r}: {reply.text[at - 80 : at + 40]!r}")
            shown += reply.text.count("&lt;b id=hunt&gt;")
        for path in (
            f"/w/{hostile.tenant.slug}/fleet.json",
            f"/w/{hostile.tenant.slug}/fleet.json?view=dense",
        ):
            reply = board.call(c, "GET", path)
            assert reply.status_code == 200, reply
            for fragment in _fragments(reply.json()):
                for raw in RAW:
                    if raw in fragment:
                        problems.append(f"{path}: raw {raw!r} in an HTML fragment")
    assert not problems, "\n".join(problems)
    assert shown >= 10, f"the hostile names were hardly shown ({shown}): the test proves little"


# ---- agent: the live stream ---------------------------------------------------------------


def _util(ts: float, uuid: str = "GPU-live-0") -> str:
    return json.dumps(
        {"type": "util", "ts": ts, "gpus": [{"deviceUuid": uuid, "utilPct": 7, "memUsedMb": 1}]}
    )


HOSTILE_FRAMES: list[str | bytes] = [
    "not json",
    '{"type": "util", "ts": NaN, "gpus": []}',
    '{"type": "util", "ts": Infinity, "gpus": []}',
    _util(1e12),  # year 33658: no date for it
    _util(1e308),
    _util(-1.0),
    _util(datetime.now(UTC).timestamp(), "<b id=hunt>"),
    '{"type": "util", "ts": 1, "gpus": [' + "[" * 10_000 + "]" * 10_000 + "]}",
    '{"type": "util", "ts": 1, "ts": "x", "gpus": []}',
    b"\x00\xff binary",
    "x" * 70_000,
]


def test_hostile_stream_frames_break_no_live_view(board: LiveBoard) -> None:
    """Was a 500 on /stream/latest and a dead SSE stream for the whole workspace: a util
    message with ts 1e12 (a date past year 9999) was kept, and no page could show it."""
    import asyncio

    import websockets

    from tests.security.seed import make_tenant

    tenant = make_tenant(board, "stream")
    noisy = enroll(board, tenant, unique("noisy"))
    quiet = enroll(board, tenant, unique("quiet"))
    url = board.url.replace("http", "ws", 1) + "/agent/v1/stream"

    async def send(host: Host, frames: list[str | bytes]) -> None:
        async with websockets.connect(url, additional_headers=host.auth, open_timeout=30) as ws:
            for frame in frames:
                await ws.send(frame)
                await asyncio.sleep(0.25)  # past the board's per-host spacing

    asyncio.run(send(noisy, HOSTILE_FRAMES))
    asyncio.run(send(quiet, [_util(datetime.now(UTC).timestamp())]))
    base = f"/api/v1/workspaces/{tenant.slug}/stream"
    deadline = datetime.now(UTC) + timedelta(seconds=60)
    with board.client(tenant.admin.token) as c:
        while True:
            latest = board.call(c, "GET", f"{base}/latest")
            assert latest.status_code == 200, latest
            hosts = {h["hostId"]: h for h in latest.json()["hosts"]}
            if quiet.host_id in hosts:
                break
            assert datetime.now(UTC) < deadline, f"the good sample never arrived: {latest}"
    # The SSE stream replays what the process kept: it reaches the good sample alive.
    seen = b""
    with (
        httpx.Client(
            base_url=board.url,
            headers={"Authorization": f"Bearer {tenant.admin.token}"},
            timeout=60,
        ) as c,
        c.stream("GET", base) as events,
    ):
        assert events.status_code == 200, events
        for chunk in events.iter_bytes():
            seen += chunk
            if quiet.host_id.encode() in seen:
                break
    assert seen.startswith(b"event: hello"), seen[:200]
    assert quiet.host_id.encode() in seen, f"the stream ended early: {seen[-300:]!r}"
    for sample in hosts.values():
        assert sample["ts"] <= 253_402_300_799, sample
        datetime.fromisoformat(sample["at"])


# ---- pages: every query parameter, hostile ----------------------------------------------------

QUERY_VALUES = [
    '"><script>alert(1)</script>',
    "%ED%A0%80",  # a lone surrogate, percent-encoded
    "%FF%FE",  # not UTF-8
    "9" * 400,
    "1e400",
    "-1",
    "NaN",
    "\u0661\u0662",  # Arabic-Indic digits: str.isdigit says yes
    "2026-02-30",
    "0000-00-00T25:61",
    "\u202e",
    "x" * 8000,
    ",,,",
    '=HYPERLINK("http://evil.example")',
    "@SUM(1+1)",
]


@pytest.fixture(scope="module")
def page_gets(board: LiveBoard, tmp_path_factory: pytest.TempPathFactory) -> list[Endpoint]:
    with board.client() as c:
        schema = board.call(c, "GET", "/openapi.json").json()
    found = discover(
        schema, tmp_path_factory.mktemp("hunt-gets"), board.env["GUA_BOARD_DATABASE_URL"]
    )
    gets = [e for e in found if e.is_page and e.method == "GET" and e.query]
    assert len(gets) >= 5, gets
    return gets


def test_every_page_query_parameter_hostile(
    board: LiveBoard, page_targets: PageTargets, page_gets: list[Endpoint]
) -> None:
    t = page_targets
    problems = []
    with board.signed_in(t.admin.email, t.admin.password) as c:
        for endpoint in page_gets:
            if endpoint.path.endswith("/stream"):
                continue  # an event stream: its parameters are the host's id only
            url = _url(endpoint, t)
            for name, value in itertools.product(endpoint.query, QUERY_VALUES):
                encoded = value if value.startswith("%") else quote(value, safe="")
                reply = board.call(c, "GET", f"{url}?{quote(name)}={encoded}")
                if reply.status_code >= 500 or "Internal Server Error" in reply.text:
                    problems.append(f"GET {url}?{name}={value[:30]!r}: {reply}")
                    continue
                kind = reply.headers.get("content-type", "")
                if "text/html" in kind and "<script>alert(1)" in reply.text:
                    problems.append(f"GET {url}?{name}={value[:30]!r}: markup reflected")
                if "text/csv" in kind and reply.status_code == 200:
                    cells = [cell for row in csv.reader(io.StringIO(reply.text)) for cell in row]
                    formulas = [cell for cell in cells if cell[:1] in ("=", "+", "@", "\t", "\r")]
                    if formulas:
                        problems.append(f"GET {url}?{name}={value[:30]!r}: cells {formulas[:3]}")
    assert not problems, "\n".join(problems)


# ---- pages: single sign-on with hostile state, code and error ---------------------------------


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


# ---- chunked bodies that never end --------------------------------------------------------


def _never_ending(board: LiveBoard, head: bytes, trickle: bool) -> bytes:
    """Headers and one chunk; then silence (or a byte a second), until the board answers
    or closes. A generous deadline: the board's own body deadlines are 5 s idle, 12 s whole."""
    import time

    deadline = time.monotonic() + 120
    with socket.create_connection(("127.0.0.1", board.port), timeout=2) as sock:
        sock.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n10\r\n" + b"{" * 16 + b"\r\n")
        answer = b""
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                if trickle:
                    try:
                        sock.sendall(b"1\r\n \r\n")
                    except OSError:
                        break
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
            if b"\r\n\r\n" in answer:
                break
        else:
            raise AssertionError("the board waited for a never-ending body past 120 s")
    return answer


def test_chunked_bodies_that_never_end(board: LiveBoard, host: Host, admin: Person) -> None:
    from concurrent.futures import ThreadPoolExecutor

    agent = b"Authorization: Bearer " + host.token.encode() + b"\r\n"
    heads = {
        "observation": b"POST /agent/v1/observations HTTP/1.1\r\nHost: x\r\n"
        + agent
        + b"Content-Type: application/json\r\n",
        "archive": b"POST /agent/v1/archives?date=2026-01-01&table=gpu_sample HTTP/1.1\r\n"
        b"Host: x\r\n" + agent + b"Content-Type: application/gzip\r\n",
        "claim": b"POST /agent/v1/enrollments/claim HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\n",
        "sign-in form": b"POST /signin HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n",
    }
    before = count(board, "SELECT count(*) FROM host_observations")
    jobs = [(name, trickle) for name in heads for trickle in (False, True)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        answers = list(pool.map(lambda job: _never_ending(board, heads[job[0]], job[1]), jobs))
    problems = []
    for (name, trickle), answer in zip(jobs, answers, strict=True):
        statuses = _statuses(answer)
        if not statuses or statuses[0] not in (b"400", b"408", b"413"):
            problems.append(f"{name} (trickle={trickle}): {answer[:300]!r}")
    assert not problems, "\n".join(problems)
    assert count(board, "SELECT count(*) FROM host_observations") == before
    # The board still serves.
    assert push(board, host, observation()).status_code == 202
