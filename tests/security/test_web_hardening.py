"""The web board against a browser-borne attacker: cookies, CSRF, redirects, reflection.

- The session cookie is Secure behind an HTTPS proxy (trusted X-Forwarded-Proto), and
  always HttpOnly with a SameSite policy.
- Every form post, found by route discovery, refuses a missing, wrong or foreign CSRF token
  with 403 and changes nothing.
- `next` after sign-in never leaves the board, however it is spelled.
- What a visitor types is never reflected as markup; redirects never name the Host header.
- Every kind of page answer (HTML, the refresh JSON, CSV, the event stream, error pages)
  carries the security headers and is never cached.
"""

from __future__ import annotations

import itertools
import re
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import pytest

from tests.security.conftest import World
from tests.security.routes import Endpoint, discover
from tests.security.seed import (
    Host,
    Person,
    Tenant,
    add_member,
    enroll,
    issue_enrollment,
    new_password,
    observation,
    push,
    unique,
)
from tests.support.live import LiveBoard
from tests.support.replies import Reply, csrf_of


def _session_cookie(reply: Reply) -> str:
    for header in reply.headers.get_list("set-cookie"):
        if header.startswith("gua_session="):
            return header
    raise AssertionError(f"no gua_session cookie set: {reply.headers}")


def _attributes(set_cookie: str) -> set[str]:
    return {part.strip().split("=")[0].lower() for part in set_cookie.split(";")[1:]}


@pytest.fixture
def person(board: LiveBoard, world: World) -> Person:
    a = world.a
    email = f"{unique('web')}@alpha.example"
    password = new_password(board)
    reply = add_member(board, a.slug, a.admin.token, email, "admin", password)
    assert reply.status_code == 201, reply
    return Person(email, password, reply.json()["apiToken"], "admin")


# ---- cookies -------------------------------------------------------------------------------


def test_session_cookie_is_secure_behind_an_https_proxy(board: LiveBoard, person: Person) -> None:
    https = {"X-Forwarded-Proto": "https"}
    with board.client() as c:
        form = board.call(c, "GET", "/signin", headers=https)
    anonymous = _session_cookie(form)
    assert "secure" in _attributes(anonymous), anonymous
    cookie = anonymous.split(";")[0]
    with board.client() as c:
        signed = board.call(
            c,
            "POST",
            "/signin",
            headers={**https, "Cookie": cookie},
            data={
                "csrf_token": csrf_of(form.text),
                "email": person.email,
                "password": person.password,
                "next": "/",
            },
        )
    assert signed.status_code == 303, signed
    attributes = _attributes(_session_cookie(signed))
    assert {"secure", "httponly", "samesite"} <= attributes, attributes


def test_session_cookie_is_httponly_and_samesite_over_http(
    board: LiveBoard, person: Person
) -> None:
    with board.client() as c:
        reply = board.sign_in(c, person.email, person.password)
    attributes = _attributes(_session_cookie(reply))
    assert {"httponly", "samesite"} <= attributes, attributes


def test_the_api_ignores_session_cookies(board: LiveBoard, world: World, person: Person) -> None:
    """Cookies never authenticate the API, so no API call can be forged cross-site."""
    a = world.a
    with board.signed_in(person.email, person.password) as c:
        for method, path in (
            ("GET", f"/api/v1/workspaces/{a.slug}/hosts"),
            ("GET", f"/api/v1/workspaces/{a.slug}/members"),
            ("POST", f"/api/v1/workspaces/{a.slug}/enrollment-tokens"),
            ("GET", "/api/v1/me/api-tokens"),
        ):
            kw: dict[str, Any] = {"json": {}} if method == "POST" else {}
            reply = board.call(c, method, path, **kw)
            assert reply.status_code == 401, reply


# ---- CSRF on every form post -----------------------------------------------------------------


@dataclass
class Targets:
    tenant: Tenant
    person: Person
    member: Person
    host: Host
    enrollment_prefix: str
    settings: dict[str, Any]


@pytest.fixture
def targets(board: LiveBoard, scratch: Tenant) -> Targets:
    """A signed-in admin of the scratch workspace, and things a forged form could harm."""
    people = []
    for role in ("admin", "member"):
        email = f"{unique('csrf-' + role)}@charlie.example"
        password = new_password(board)
        reply = add_member(board, scratch.slug, scratch.admin.token, email, role, password)
        assert reply.status_code == 201, reply
        people.append(Person(email, password, reply.json()["apiToken"], role))
    host = enroll(board, scratch, unique("csrf-host"))
    pending_name = unique("csrf-pending")
    issue_enrollment(board, scratch, pending_name)
    with board.client(scratch.admin.token) as c:
        listed = board.call(c, "GET", f"/api/v1/workspaces/{scratch.slug}/enrollment-tokens")
        settings = board.call(c, "GET", f"/api/v1/workspaces/{scratch.slug}/settings").json()
    prefix = next(
        t["tokenPrefix"]
        for t in listed.json()["enrollmentTokens"]
        if t["displayName"] == pending_name
    )
    return Targets(scratch, people[0], people[1], host, prefix, settings)


def _fill(endpoint: Endpoint, t: Targets) -> list[str]:
    values = {
        "slug": [t.tenant.slug],
        "host_id": [t.host.host_id],
        "email": [t.member.email],
        "prefix": [t.enrollment_prefix, t.person.token[:16]],
        "token_prefix": [t.enrollment_prefix, t.person.token[:16]],
    }
    names = endpoint.path_params
    urls = []
    for chosen in itertools.product(*(values.get(n, [t.host.host_id]) for n in names)):
        path = endpoint.path
        for name, value in zip(names, chosen, strict=True):
            path = path.replace(f"{{{name}}}", quote(value, safe=""))
        urls.append(path)
    return urls


FORM = {
    "email": "csrf-added@charlie.example",
    "role": "admin",
    "password": "forged-password-1",
    "current_password": "forged-password-0",
    "new_password": "forged-password-1",
    "display_name": "forged",
    "expires_in_hours": "1",
    "staleAfterSeconds": "77",
    "next": "/",
    "workspace": "",
}


def test_every_form_post_needs_the_session_csrf_token(
    board: LiveBoard, targets: Targets, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with board.client() as c:
        schema = board.call(c, "GET", "/openapi.json").json()
    posts = [
        e
        for e in discover(
            schema, tmp_path_factory.mktemp("forms"), board.env["GUA_BOARD_DATABASE_URL"]
        )
        if e.is_page and e.method == "POST"
    ]
    assert len(posts) >= 5, posts
    t = targets
    foreign = board.client()
    foreign_csrf = board.csrf(foreign, "/signin")
    form = {**FORM, "workspace": t.tenant.slug, "email": FORM["email"]}
    problems = []
    with board.signed_in(t.person.email, t.person.password) as c:
        own_csrf = board.csrf(c, "/account")
        for endpoint in posts:
            for url in _fill(endpoint, t):
                for label, token in (
                    ("none", None),
                    ("wrong", own_csrf[::-1]),
                    ("another session's", foreign_csrf),
                ):
                    data = dict(form)
                    if token is not None:
                        data["csrf_token"] = token
                    reply = board.call(c, "POST", url, data=data)
                    if reply.status_code != 403:
                        problems.append(f"POST {url} with {label} CSRF token: {reply}")
        # Nothing happened: the session lives, and so does everything a form could touch.
        assert board.call(c, "GET", "/account").status_code == 200, "the session was ended"
    foreign.close()
    assert not problems, "\n".join(problems)
    assert push(board, t.host, observation()).status_code == 202, "the host was revoked"
    with board.client(t.tenant.admin.token) as c:
        slug = t.tenant.slug
        members = board.call(c, "GET", f"/api/v1/workspaces/{slug}/members").json()["members"]
        tokens = board.call(c, "GET", f"/api/v1/workspaces/{slug}/enrollment-tokens").json()
        settings = board.call(c, "GET", f"/api/v1/workspaces/{slug}/settings").json()
    emails = {m["email"] for m in members}
    assert t.member.email in emails, "a member was removed"
    assert FORM["email"] not in emails, "a member was added"
    pending = {x["tokenPrefix"]: x["state"] for x in tokens["enrollmentTokens"]}
    assert pending[t.enrollment_prefix] == "active", "the enrollment token was revoked"
    assert settings == t.settings, "settings changed"
    with board.client(t.person.token) as c:
        assert board.call(c, "GET", f"/api/v1/workspaces/{slug}/hosts").status_code == 200
    with board.client() as c:
        assert board.sign_in(c, t.person.email, t.person.password).status_code == 303


# ---- where sign-in sends the browser -----------------------------------------------------------

EVIL_NEXT = [
    "//evil.example/",
    "///evil.example/",
    "////evil.example/",
    "/\\evil.example/",
    "\\\\evil.example/",
    "/\t/evil.example/",
    "/\n/evil.example/",
    " //evil.example/",
    "https://evil.example/",
    "http:evil.example",
    "HTTPS://evil.example",
    "javascript:alert(1)",
    "/%2F%2Fevil.example/",
    "/%5C%5Cevil.example/",
    "%2F%2Fevil.example",
    "/.//evil.example/",
    "/\u3000/evil.example",
    "@evil.example",
    "/signin?next=//evil.example",
]


def browser_target(base: str, location: str) -> str:
    """Where a browser goes for a Location: it drops tabs and newlines, trims C0 controls
    and spaces, and reads backslashes as slashes (WHATWG URL parsing)."""
    cleaned = re.sub(r"[\t\n\r]", "", location).strip("\x00- ").replace("\\", "/")
    return urljoin(base + "/", cleaned)


@pytest.mark.parametrize("evil", EVIL_NEXT)
def test_next_never_leaves_the_board(board: LiveBoard, person: Person, evil: str) -> None:
    with board.client() as c:
        reply = board.sign_in(c, person.email, person.password, next=evil)
        assert reply.status_code == 303, reply
        signed_in_again = board.call(c, "GET", "/signin", params={"next": evil})
    for answer in (reply, signed_in_again):
        location = answer.headers.get("location", "")
        assert not re.search(r"[\r\n]", location), location
        target = urlsplit(browser_target(board.url, location))
        assert target.scheme == "http", f"next={evil!r} sent the browser to {location!r}"
        assert target.netloc == urlsplit(board.url).netloc, (
            f"next={evil!r} sent the browser to {location!r}"
        )


# ---- reflection --------------------------------------------------------------------------------

SCRIPT = '"><script>alert(1)</script><img src=x onerror=alert(2)>'


def _no_markup(reply: Reply) -> None:
    assert "<script>alert(1)" not in reply.text, reply
    assert "onerror=alert(2)>" not in reply.text, reply


def test_what_a_visitor_types_is_not_markup(board: LiveBoard, world: World, person: Person) -> None:
    with board.client() as c:
        form = board.call(c, "GET", "/signin", params={"next": "/" + SCRIPT})
        _no_markup(form)
        failed = board.call(
            c,
            "POST",
            "/signin",
            data={
                "csrf_token": csrf_of(form.text),
                "email": SCRIPT + "@x.example",
                "password": "wrong-password",
                "next": "/" + SCRIPT,
            },
        )
        assert failed.status_code == 401, failed
        _no_markup(failed)
    with board.signed_in(person.email, person.password) as c:
        for path in (
            f"/w/{quote(SCRIPT, safe='')}/",
            f"/w/{world.a.slug}/hosts/{quote(SCRIPT)}",
            f"/w/{world.a.slug}/usage?groupBy={quote(SCRIPT)}",
            f"/w/{world.a.slug}/?host={quote(SCRIPT)}&state={quote(SCRIPT)}",
        ):
            reply = board.call(c, "GET", path)
            assert reply.status_code < 500, reply
            _no_markup(reply)
        csrf = board.csrf(c, f"/w/{world.a.slug}/admin")
        added = board.call(
            c,
            "POST",
            f"/w/{world.a.slug}/admin/members",
            data={"csrf_token": csrf, "email": SCRIPT, "role": SCRIPT},
        )
        assert 400 <= added.status_code < 500, added
        _no_markup(added)


def test_pages_carry_the_security_headers(board: LiveBoard, world: World, person: Person) -> None:
    with board.signed_in(person.email, person.password) as c:
        for path in ("/signin", "/account", f"/w/{world.a.slug}/", f"/w/{world.a.slug}/admin"):
            reply = board.call(c, "GET", path)
            if path == "/signin":
                assert reply.status_code == 303, reply
                continue
            assert reply.status_code == 200, reply
            csp = reply.headers.get("content-security-policy", "")
            assert "frame-ancestors 'none'" in csp, (path, csp)
            assert reply.headers.get("x-content-type-options") == "nosniff", path
            assert "no-store" in reply.headers.get("cache-control", ""), path


# ---- the Host header ---------------------------------------------------------------------------


def test_redirects_never_name_the_host_header(
    board: LiveBoard, world: World, person: Person
) -> None:
    evil = {"Host": "evil.example"}
    with board.client() as c:
        unsigned = board.call(c, "GET", f"/w/{world.a.slug}/admin", headers=evil)
        form = board.call(c, "GET", "/signin", headers=evil)
        signed = board.call(
            c,
            "POST",
            "/signin",
            headers=evil,
            data={
                "csrf_token": csrf_of(form.text),
                "email": person.email,
                "password": person.password,
                "next": "/account",
            },
        )
        home = board.call(c, "GET", "/", headers=evil)
        # A missing trailing slash is redirected too: that Location must not trust Host.
        slash = board.call(c, "GET", f"/w/{world.a.slug}", headers=evil)
        api_slash = board.call(c, "GET", f"/api/v1/workspaces/{world.a.slug}/hosts/", headers=evil)
    for reply in (unsigned, signed, home, slash):
        assert reply.status_code in (302, 303, 307), reply
        assert "evil.example" not in reply.headers.get("location", ""), reply.headers
    # The API does not redirect a trailing slash at all (Starlette's redirect is off).
    assert api_slash.status_code == 404, api_slash
    assert "location" not in api_slash.headers


@pytest.mark.parametrize(
    "host_header",
    [
        b"evil.example\r\nX-Injected: 1",
        b"a" * 70_000,
        b"",
        b"[::1",
        b"127.0.0.1:99999999",
        b"\xff\xfe",
    ],
)
def test_odd_host_headers_are_refused_cleanly(board: LiveBoard, host_header: bytes) -> None:
    raw = b"GET /signin HTTP/1.1\r\nHost: " + host_header + b"\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", board.port), timeout=60) as sock:
        sock.sendall(raw)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    status = answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/1.1 ") else b"(closed)"
    assert not status.startswith(b"5"), answer[:300]
    assert b"X-Injected" not in answer.split(b"\r\n\r\n")[0], answer[:300]


def _guarded(reply: Reply, what: str) -> list[str]:
    h = reply.headers
    problems = []
    if "frame-ancestors 'none'" not in h.get("content-security-policy", ""):
        problems.append(f"{what}: no CSP frame-ancestors ({reply})")
    if "script-src 'self'" not in h.get("content-security-policy", ""):
        problems.append(f"{what}: no CSP script-src ({reply})")
    if h.get("x-frame-options") != "DENY":
        problems.append(f"{what}: X-Frame-Options {h.get('x-frame-options')!r}")
    if h.get("x-content-type-options") != "nosniff":
        problems.append(f"{what}: X-Content-Type-Options {h.get('x-content-type-options')!r}")
    if not h.get("referrer-policy"):
        problems.append(f"{what}: no Referrer-Policy")
    if "no-store" not in h.get("cache-control", ""):
        problems.append(f"{what}: Cache-Control {h.get('cache-control')!r}")
    return problems


def test_every_kind_of_page_answer_carries_the_security_headers(
    board: LiveBoard, world: World, person: Person
) -> None:
    a = world.a
    s = f"/w/{a.slug}"
    host = a.hosts[0].host_id
    problems: list[str] = []
    with board.client() as anonymous:
        for path in ("/signin", f"{s}/admin", f"{s}/fleet.json", "/notices/snooze?token=x"):
            problems += _guarded(board.call(anonymous, "GET", path), f"signed out: {path}")
    with board.signed_in(person.email, person.password) as c:
        for path in (
            "/account",
            f"{s}/",
            f"{s}/fleet.json",
            f"{s}/hosts/{host}",
            f"{s}/hosts/{host}.json",
            f"{s}/hosts/{host}/stream",
            f"{s}/fleet/stream",
            f"{s}/usage.csv",
            f"{s}/statements.csv",
            f"{s}/usage?from=not-a-date",  # a 422 page
            f"{s}/usage.csv?from=not-a-date",  # a 422 JSON
            f"{s}/hosts/not-a-host",  # a 404 page
            f"/w/{world.b.slug}/",  # another workspace: 404
            "/signin",  # a redirect
        ):
            reply = board.call(c, "GET", path)
            assert reply.status_code < 500, reply
            problems += _guarded(reply, path)
        fleet = board.call(c, "GET", f"{s}/fleet.json")
        etag = fleet.headers.get("etag", "")
        again = board.call(c, "GET", f"{s}/fleet.json", headers={"If-None-Match": etag})
        if again.status_code == 304:  # a host may have pushed in between
            problems += _guarded(again, "fleet.json 304")
        forged = board.call(c, "POST", f"{s}/admin/settings", data={"csrf_token": "forged"})
        assert forged.status_code == 403, forged
        problems += _guarded(forged, "a refused form")
    assert not problems, "\n".join(problems)
