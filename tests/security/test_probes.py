"""Beyond the known holes: what an attacker tries next.

Method confusion on every discovered route, path traversal in ids and static files, huge
bodies, queries and headers (bounded memory, a 4xx, never a 500), role boundaries inside one
workspace, and tokens in odd spellings.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest

from tests.security.conftest import World
from tests.security.routes import Endpoint, discover
from tests.security.seed import Person, add_member, new_password, unique
from tests.support.live import LiveBoard, measure_peaks

HUGE_BODY = 256 * 1024 * 1024
BODY_PEAK_MIB = 100
ODD_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "FOO")


@pytest.fixture(scope="module")
def endpoints(board: LiveBoard, tmp_path_factory: pytest.TempPathFactory) -> list[Endpoint]:
    with board.client() as c:
        schema = board.call(c, "GET", "/openapi.json").json()
    return discover(
        schema, tmp_path_factory.mktemp("probe-routes"), board.env["GUA_BOARD_DATABASE_URL"]
    )


def _a_values(world: World) -> dict[str, str]:
    a = world.a
    return {
        "slug": a.slug,
        "host_id": a.hosts[0].host_id,
        "email": "nobody-here@alpha.example",
        "prefix": "gua_pat_00000000",
        "token_prefix": "gua_pat_00000000",
    }


def test_methods_a_route_does_not_have(
    board: LiveBoard, world: World, endpoints: list[Endpoint]
) -> None:
    """Every other method on every route: 405 (or 400/404/501), never a 2xx, never a 500."""
    allowed: dict[str, set[str]] = {}
    for e in endpoints:
        if e.method != "WS":
            allowed.setdefault(e.path, set()).add(e.method)
    values = _a_values(world)
    problems = []
    with board.client(world.a.admin.token) as c:
        for path, methods in allowed.items():
            url = path
            for name in Endpoint("GET", path).path_params:
                url = url.replace(f"{{{name}}}", quote(values.get(name, "x"), safe=""))
            for method in ODD_METHODS:
                if method in methods or (method == "OPTIONS" and "GET" in methods):
                    continue
                reply = board.call(c, method, url)
                if reply.status_code not in (400, 401, 403, 404, 405, 501):
                    problems.append(f"{method} {url}: {reply}")
    assert not problems, "\n".join(problems)


def test_method_override_headers_are_ignored(board: LiveBoard, world: World) -> None:
    a = world.a
    email = f"{unique('override')}@alpha.example"
    reply = add_member(board, a.slug, a.admin.token, email, "member", None)
    assert reply.status_code == 201, reply
    path = f"/api/v1/workspaces/{a.slug}/members/{email}"
    with board.client(a.admin.token) as c:
        for method in ("GET", "POST"):
            answer = board.call(
                c,
                method,
                path + "?_method=DELETE",
                headers={
                    "X-HTTP-Method-Override": "DELETE",
                    "X-Method-Override": "DELETE",
                    "X-HTTP-Method": "DELETE",
                },
            )
            assert answer.status_code in (404, 405), answer
        members = board.call(c, "GET", f"/api/v1/workspaces/{a.slug}/members").json()
    assert email in {m["email"] for m in members["members"]}


STATIC_TRAVERSALS = [
    "/static/../board/settings.py",
    "/static/..%2f..%2fsettings.py",
    "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/static/..%5c..%5csettings.py",
    "/static//etc/passwd",
    "/static/%2fetc%2fpasswd",
    "/static/....//....//etc/passwd",
    "/static/board.css%00.py",
]


@pytest.mark.parametrize("path", STATIC_TRAVERSALS)
def test_static_files_stay_in_their_folder(board: LiveBoard, path: str) -> None:
    raw = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
    answer = _raw(board, raw)
    assert b"root:x:0" not in answer, answer[:300]
    assert b"BaseSettings" not in answer, answer[:300]
    assert not answer.startswith(b"HTTP/1.1 5"), answer[:300]


ODD_IDS = [
    "..",
    "%00",
    "' OR '1'='1",
    "1;DROP TABLE hosts",
    "x" * 10_000,
    "\u202e\u0000",
    "%2e%2e%2f",
    "00000000-0000-0000-0000-000000000000",
    "*",
    "%25",
    "gua_pat_%25",
    "\uffff",
]


@pytest.fixture(scope="module")
def admin_page(board: LiveBoard, world: World) -> Iterator[tuple[httpx.Client, str]]:
    a = world.a
    with board.signed_in(a.admin.email, a.admin.password) as c:
        yield c, board.csrf(c, "/account")


def test_odd_ids_in_every_path(
    board: LiveBoard,
    world: World,
    endpoints: list[Endpoint],
    admin_page: tuple[httpx.Client, str],
) -> None:
    """Every path parameter of every route, filled with odd values by A's own admin:
    a clean 4xx (or a slash redirect on this board), never a 500, never B's data."""
    a = world.a
    page, csrf = admin_page
    problems = []
    with board.client(a.admin.token) as api:
        for endpoint in endpoints:
            names = endpoint.path_params
            if endpoint.method == "WS" or not names:
                continue
            client = page if endpoint.is_page else api
            for odd in ODD_IDS:
                for keep_slug in (True, False) if names != ["slug"] else (False,):
                    url = endpoint.path
                    for name in names:
                        value = a.slug if keep_slug and name == "slug" else odd
                        url = url.replace(f"{{{name}}}", quote(value, safe="%"))
                    kw: dict[str, Any] = {}
                    if endpoint.method in ("POST", "PUT", "PATCH"):
                        kw = {"data": {"csrf_token": csrf}} if endpoint.is_page else {"json": {}}
                    try:
                        reply = board.call(client, endpoint.method, url, **kw)
                    except httpx.TransportError as exc:  # closed on us: not a 500
                        problems.append(f"{endpoint.method} {url[:150]}: CLOSED {exc!r}")
                        continue
                    status = reply.status_code
                    if status in (307, 308):  # "a/../" normalized, then a slash redirect
                        location = urlsplit(reply.headers.get("location", ""))
                        if location.netloc not in ("", urlsplit(board.url).netloc):
                            problems.append(f"{endpoint.method} {url}: to {location}")
                    elif status >= 500 or status < 300:
                        problems.append(
                            f"{endpoint.method} {url[:150]}: {status} {reply.text[:80]}"
                        )
                    if any(name in reply.text for name in world.b_names):
                        problems.append(f"{endpoint.method} {url[:150]}: B's names")
    assert not problems, f"{len(problems)} answers:\n" + "\n".join(sorted(set(problems)))


def test_wildcards_in_prefixes_match_nothing(board: LiveBoard, world: World) -> None:
    """A LIKE-style pattern is not a prefix: it revokes no token."""
    a = world.a
    with board.client(a.member.token) as c:
        for pattern in ("gua_pat_%", "gua_pat_________", "%", "gua_pat_.*"):
            reply = board.call(c, "DELETE", f"/api/v1/me/api-tokens/{quote(pattern, safe='')}")
            assert reply.status_code in (404, 422), reply
        assert board.call(c, "GET", f"/api/v1/workspaces/{a.slug}/hosts").status_code == 200


def _stream(total: int, prefix: bytes) -> Iterator[bytes]:
    yield prefix
    chunk = b"a" * (1024 * 1024)
    for _ in range(total // len(chunk)):
        yield chunk


def _huge_post(
    board: LiveBoard,
    method: str,
    path: str,
    content_type: str,
    prefix: bytes,
    token: str | None = None,
) -> tuple[str, float]:
    headers = {"Content-Type": content_type}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with measure_peaks(board) as peaks:
        try:
            with httpx.Client(timeout=120, trust_env=False) as c:
                r = c.request(
                    method, board.url + path, headers=headers, content=_stream(HUGE_BODY, prefix)
                )
                outcome = f"{r.status_code} {r.text[:200]}"
        except httpx.HTTPError as exc:  # the board may close the connection instead
            outcome = f"closed ({type(exc).__name__})"
    return outcome, peaks.worst_mib


@pytest.mark.parametrize(
    ("method", "path", "content_type", "prefix"),
    [
        ("POST", "/api/v1/workspaces/{slug}/members", "application/json", b'{"email": "'),
        ("PATCH", "/api/v1/workspaces/{slug}/settings", "application/json", b'{"x": "'),
        ("POST", "/api/v1/workspaces/{slug}/enrollment-tokens", "application/json", b'{"a":"'),
        ("POST", "/signin", "application/x-www-form-urlencoded", b"email="),
        ("POST", "/agent/v1/enrollments/claim", "application/json", b'{"a": "'),
        ("POST", "/agent/v1/observations", "application/json", b'{"a": "'),
    ],
)
def test_huge_body_from_a_stranger(
    board: LiveBoard, world: World, method: str, path: str, content_type: str, prefix: bytes
) -> None:
    """A 256 MiB body without credentials: refused without buffering it all in a worker."""
    outcome, grown = _huge_post(board, method, path.format(slug=world.a.slug), content_type, prefix)
    assert not outcome.startswith("5"), outcome
    assert not outcome.startswith("2"), outcome
    assert grown < BODY_PEAK_MIB, (
        f"{method} {path} without a token: a worker grew by {grown:.0f} MiB "
        f"for a {HUGE_BODY >> 20} MiB body (answer: {outcome})"
    )


def test_huge_body_from_an_admin(board: LiveBoard, world: World) -> None:
    a = world.a
    outcome, grown = _huge_post(
        board,
        "PATCH",
        f"/api/v1/workspaces/{a.slug}/settings",
        "application/json",
        b'{"timezone": "',
        a.admin.token,
    )
    assert not outcome.startswith(("2", "5")), outcome
    assert grown < BODY_PEAK_MIB, f"a worker grew by {grown:.0f} MiB (answer: {outcome})"


def _raw(board: LiveBoard, request: bytes) -> bytes:
    answer = b""
    with socket.create_connection(("127.0.0.1", board.port), timeout=60) as sock:
        try:
            sock.sendall(request)
            while chunk := sock.recv(65536):
                answer += chunk
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            pass
    return answer


@pytest.mark.parametrize(
    ("label", "request_bytes"),
    [
        ("1 MiB query", b"GET /healthz?x=" + b"a" * (1 << 20) + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("64 KiB path", b"GET /w/" + b"a" * (1 << 16) + b"/ HTTP/1.1\r\nHost: x\r\n\r\n"),
        (
            "1 MiB header",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n",
        ),
        (
            "20,000 headers",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-%d: 1\r\n" % i for i in range(20_000))
            + b"\r\n",
        ),
        (
            "8 MiB cookie",
            b"GET /account HTTP/1.1\r\nHost: x\r\nCookie: gua_session="
            + b"a" * (8 << 20)
            + b"\r\n\r\n",
        ),
        (
            "bad chunked body",
            b"POST /signin HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
            b"\r\n\r\nffffffffffffffff\r\naaaa\r\n",
        ),
        (
            "two lengths",
            b"POST /signin HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            b"Content-Length: 50\r\n\r\nemail",
        ),
        (
            "length and chunked",
            b"POST /signin HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /account HTTP/1.1\r\nHost: x\r\n\r\n",
        ),
    ],
)
def test_malformed_or_huge_requests(board: LiveBoard, label: str, request_bytes: bytes) -> None:
    with measure_peaks(board) as peaks:
        answer = _raw(board, request_bytes)
    status = answer[9:12] if answer.startswith(b"HTTP/1.1 ") else b"closed"
    assert not status.startswith(b"5"), f"{label}: {answer[:300]!r}"
    assert peaks.worst_mib < BODY_PEAK_MIB, f"{label}: a worker grew by {peaks.worst_mib:.0f} MiB"
    with board.client() as c:
        assert board.call(c, "GET", "/healthz").status_code == 200


# ---- roles inside one workspace ----------------------------------------------------------------


@pytest.fixture
def teammate(board: LiveBoard, world: World) -> Person:
    a = world.a
    email = f"{unique('teammate')}@alpha.example"
    reply = add_member(board, a.slug, a.admin.token, email, "member", new_password(board))
    assert reply.status_code == 201, reply
    return Person(email, "", reply.json()["apiToken"], "member")


@pytest.mark.parametrize("role", ["member", "finance"])
def test_non_admins_cannot_administer(
    board: LiveBoard, world: World, teammate: Person, role: str
) -> None:
    a = world.a
    token = a.person(role).token
    host = a.hosts[0].host_id
    attempts = [
        (
            "POST",
            f"/api/v1/workspaces/{a.slug}/members",
            {
                "email": f"{unique('escalate')}@alpha.example",
                "role": "admin",
                "password": "escalate-123",
            },
        ),
        (
            "POST",
            f"/api/v1/workspaces/{a.slug}/members",
            {"email": a.person(role).email, "role": "admin"},
        ),
        ("DELETE", f"/api/v1/workspaces/{a.slug}/members/{teammate.email}", None),
        ("POST", f"/api/v1/workspaces/{a.slug}/members/{teammate.email}/sign-out", None),
        ("PATCH", f"/api/v1/workspaces/{a.slug}/settings", {"staleAfterSeconds": 5}),
        ("POST", f"/api/v1/workspaces/{a.slug}/enrollment-tokens", {}),
        ("GET", f"/api/v1/workspaces/{a.slug}/enrollment-tokens", None),
        ("POST", f"/api/v1/workspaces/{a.slug}/hosts/{host}/revoke", None),
        ("GET", f"/api/v1/workspaces/{a.slug}/members", None),
    ]
    with board.client(token) as c:
        for method, path, body in attempts:
            kw: dict[str, Any] = {"json": body} if body is not None else {}
            reply = board.call(c, method, path, **kw)
            assert reply.status_code == 403, f"{role} {method} {path}: {reply}"
            reply.detail()
    with board.client(a.admin.token) as c:
        members = board.call(c, "GET", f"/api/v1/workspaces/{a.slug}/members").json()
    roles = {m["email"]: m["role"] for m in members["members"]}
    assert roles[a.person(role).email] == role
    assert teammate.email in roles


def test_finance_sees_no_process_details(board: LiveBoard, world: World) -> None:
    """The role table: finance reads reports and the host inventory, no process details."""
    a = world.a
    secret_user = world.a_linux_user
    with board.client(a.finance.token) as c:
        hosts = board.call(c, "GET", f"/api/v1/workspaces/{a.slug}/hosts")
        one = board.call(c, "GET", f"/api/v1/workspaces/{a.slug}/hosts/{a.hosts[0].host_id}")
    for reply in (hosts, one):
        assert reply.status_code == 200, reply
        assert secret_user not in reply.text, f"finance sees Linux users: {reply}"
        assert '"pid"' not in reply.text, f"finance sees processes: {reply}"
    with board.signed_in(a.finance.email, a.finance.password) as c:
        for path in (
            f"/w/{a.slug}/",
            f"/w/{a.slug}/fleet.json",
            f"/w/{a.slug}/hosts/{a.hosts[0].host_id}",
            f"/w/{a.slug}/hosts/{a.hosts[0].host_id}.json",
        ):
            reply = board.call(c, "GET", path)
            assert reply.status_code in (200, 403, 404), reply
            assert secret_user not in reply.text, f"finance sees Linux users on {path}"


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer  {t}",
        "bearer {t}",
        "Bearer {t}x",
        "Bearer {t} {t}",
        "Basic {t}",
        "{t}",
        "Bearer " + "a" * 100_000,
        "Bearer gua_pat_",
        "Bearer \u00e9{t}",
    ],
)
def test_odd_authorization_headers(board: LiveBoard, world: World, authorization: str) -> None:
    a = world.a
    value = authorization.format(t=a.admin.token)
    with board.client() as c:  # as raw bytes: a non-ASCII byte is sent as it is
        reply = board.call(
            c,
            "GET",
            f"/api/v1/workspaces/{a.slug}/hosts",
            headers={"Authorization": value.encode("latin-1")},
        )
    # Spelling variants of the real token may be accepted; anything else is a clean 401.
    if reply.status_code == 200:
        assert a.admin.token in value, reply
        return
    assert reply.status_code in (400, 401, 431), reply


def test_token_in_the_query_string_is_not_a_credential(board: LiveBoard, world: World) -> None:
    a = world.a
    with board.client() as c:
        for name in ("token", "access_token", "api_key"):
            reply = board.call(
                c, "GET", f"/api/v1/workspaces/{a.slug}/hosts", params={name: a.admin.token}
            )
            assert reply.status_code == 401, reply
