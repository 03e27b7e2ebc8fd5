"""What a browser sends to the pages, hostile, on the served board: every form field of
every page form (found by route discovery) with a NUL, a megabyte or repeated, multipart
instead of urlencoded, every page query parameter, garbage and doubled cookies, a session
on another workspace's pages, X-Forwarded-* headers. Each is a 4xx with a string detail
or an HTML error page, nothing changed, never a 500.
"""

from __future__ import annotations

import csv
import io
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlsplit

import pytest

from tests.security.checks import count, not_a_crash, raw_exchange, statuses_in
from tests.security.conftest import World
from tests.security.routes import Endpoint, discover
from tests.security.seed import (
    Host,
    Person,
    Tenant,
    enroll,
    issue_enrollment,
    observation,
    push,
    unique,
)
from tests.support.live import LiveBoard
from tests.support.replies import csrf_of, refused


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
        schema, tmp_path_factory.mktemp("page-forms"), board.env["GUA_BOARD_DATABASE_URL"]
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
        answer = raw_exchange(board, request, half_close=False)
        statuses = statuses_in(answer)
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
        schema, tmp_path_factory.mktemp("page-gets"), board.env["GUA_BOARD_DATABASE_URL"]
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


def test_a_page_query_past_its_bound_is_a_page(board: LiveBoard, page_targets: PageTargets) -> None:
    """Was the API's JSON 422 in a browser: a hand-edited URL past a parameter's bound
    now answers a page saying which; a script asking for JSON keeps the API's shape."""
    t = page_targets
    url = f"/w/{t.tenant.slug}/find-gpus?from=" + "9" * 300
    with board.signed_in(t.admin.email, t.admin.password) as c:
        page = board.call(c, "GET", url)
        script = board.call(c, "GET", url, headers={"Accept": "application/json"})
    assert page.status_code == 422, page
    assert "text/html" in page.headers["content-type"], page
    assert "from" in page.text, page
    assert "9" * 300 not in page.text, page
    assert script.status_code == 422, script
    assert isinstance(script.json()["detail"], str), script
    assert script.json()["errors"], script
