"""Host administration, enrollment tokens, the audit log, /metrics and the CLI under
hostile input.

Bugs this file found and fixed: an audit-log cursor past the largest bigint (API and
page) was a 500; the admin page audited a host revoke by its id as spelled (urn:uuid:…,
upper case) instead of the canonical id the API writes, and a revoke of another
workspace's host there was a 404 that still committed a `host.revoked` entry; an expiry of 0
hours on the admin page and in `gua-board issue-token --expires-in 0` silently issued a
token with the default lifetime where the API answers 422; a password on stdin that is
not UTF-8 made `create-user`/`set-password` end in a traceback instead of one line and
exit status 2; `serve --port 99999` listened on the wrapped port 34463 while its log said
99999, and `--workers 0` (or -5) started a board.

In process (the app and a real PostgreSQL) except for the CLI, which runs as a
subprocess against the test's own database.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx

from tests.board.answers import TOKEN, audit_rows, refused
from tests.board.builders import Tenant, enroll, make_tenant
from tests.board.db import scalar
from tests.web.helpers import PASSWORD, csrf_of, sign_in

GUA_BOARD = str(Path(sys.executable).parent / "gua-board")


async def token_rows(app: Any, slug: str) -> int:
    found = await scalar(
        app,
        "SELECT count(*) FROM enrollment_tokens t JOIN workspaces w ON w.id = t.workspace_id "
        "WHERE w.slug = %s",
        slug,
    )
    return int(found)


def browser(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://board.test")


async def admin_browser(app: Any, tenant: Tenant) -> tuple[httpx.AsyncClient, str]:
    """A browser signed in as the tenant's admin, and a CSRF token of its admin page."""
    b = browser(app)
    r = await sign_in(b, f"admin@{tenant.slug}.example", PASSWORD)
    assert r.status_code in (200, 303), r.text[:300]
    page = await b.get(f"/w/{tenant.slug}/admin")
    assert page.status_code == 200, page.text[:300]
    return b, csrf_of(page.text)


# ---- the admin page -----------------------------------------------------------------


async def test_the_admin_page_audits_a_host_revoke_by_its_canonical_id(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was audited as spelled: `urn:uuid:<UPPER>` landed in the log as the target."""
    tenant = await make_tenant(app, "hpspell")
    host_id = str((await enroll(client, tenant, "spell-node"))["hostId"])
    b, csrf = await admin_browser(app, tenant)
    async with aclosing(b):
        r = await b.post(
            f"/w/{tenant.slug}/admin/hosts/urn:uuid:{host_id.upper()}/revoke",
            data={"csrf_token": csrf},
        )
    assert r.status_code == 303, r.text[:300]
    target = await scalar(
        app,
        "SELECT target FROM audit_events WHERE action = 'host.revoked' ORDER BY id DESC LIMIT 1",
    )
    assert target == host_id


async def test_odd_expiries_on_the_admin_page_issue_nothing(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was 201 for 0 (and -0): the default lifetime, where the API answers 422."""
    tenant = await make_tenant(app, "hpexp")
    b, csrf = await admin_browser(app, tenant)
    before_tokens = await token_rows(app, tenant.slug)
    before_audit = await audit_rows(app, tenant.slug)
    async with aclosing(b):
        for hours in ("0", "-0", "0.0", "0e5", "-1", "nan", "inf", "-inf", "721", "1e308", "x"):
            r = await b.post(
                f"/w/{tenant.slug}/admin/enrollment-tokens",
                data={"csrf_token": csrf, "display_name": "n", "expires_in_hours": hours},
            )
            assert r.status_code == 422, (hours, r.status_code)
            assert not TOKEN.search(r.text), hours
        # The edges that hold: blank is the default, 720 the most.
        for hours in ("", "720", "0.5"):
            r = await b.post(
                f"/w/{tenant.slug}/admin/enrollment-tokens",
                data={"csrf_token": csrf, "display_name": "n", "expires_in_hours": hours},
            )
            assert r.status_code == 201, (hours, r.status_code)
    assert await token_rows(app, tenant.slug) == before_tokens + 3
    assert await audit_rows(app, tenant.slug) == before_audit + 3


async def test_the_api_refuses_odd_expiries(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "apiexp")
    url = f"/api/v1/workspaces/{tenant.slug}/enrollment-tokens"
    before = await token_rows(app, tenant.slug)
    odd: tuple[object, ...] = (0, -1, 720.0001, 1e308, [], "x")
    for hours in odd:
        r = await client.post(url, json={"expiresInHours": hours}, headers=tenant.auth())
        refused(r, 422)
    for raw in ('{"expiresInHours": NaN}', '{"expiresInHours": Infinity}', "[]", '"x"'):
        r = await client.post(
            url, content=raw, headers={**tenant.auth(), "Content-Type": "application/json"}
        )
        refused(r, 422)
    assert await token_rows(app, tenant.slug) == before


async def test_another_workspaces_tokens_and_hosts_are_404_on_the_admin_page(
    app: Any, client: httpx.AsyncClient
) -> None:
    a = await make_tenant(app, "hpa")
    b_ws = await make_tenant(app, "hpb")
    b_host = str((await enroll(client, b_ws, "b-node"))["hostId"])
    issued = await client.post(
        f"/api/v1/workspaces/{b_ws.slug}/enrollment-tokens",
        json={"displayName": "b-pending"},
        headers=b_ws.auth(),
    )
    b_prefix = issued.json()["tokenPrefix"]
    b, csrf = await admin_browser(app, a)
    before = await audit_rows(app, b_ws.slug) + await audit_rows(app, a.slug)
    async with aclosing(b):
        for path in (
            f"/w/{a.slug}/admin/enrollment-tokens/{b_prefix}/revoke",
            f"/w/{a.slug}/admin/hosts/{b_host}/revoke",
            f"/w/{a.slug}/admin/hosts/{b_host.upper()}/revoke",
            f"/w/{b_ws.slug}/admin/enrollment-tokens/{b_prefix}/revoke",
            f"/w/{b_ws.slug}/admin/hosts/{b_host}/revoke",
        ):
            r = await b.post(path, data={"csrf_token": csrf})
            assert r.status_code == 404, (path, r.status_code)
    for spelled in (b_host, b_host.upper()):
        r = await client.post(
            f"/api/v1/workspaces/{a.slug}/hosts/{spelled}/revoke", headers=a.auth()
        )
        refused(r, 404)
    r = await client.delete(
        f"/api/v1/workspaces/{a.slug}/enrollment-tokens/{b_prefix}", headers=a.auth()
    )
    refused(r, 404)
    after = await audit_rows(app, b_ws.slug) + await audit_rows(app, a.slug)
    assert after == before, await scalar(
        app, "SELECT string_agg(action || ' ' || coalesce(target, ''), ', ') FROM audit_events"
    )
    listed = await client.get(
        f"/api/v1/workspaces/{b_ws.slug}/enrollment-tokens", headers=b_ws.auth()
    )
    assert [t["state"] for t in listed.json()["enrollmentTokens"]].count("active") == 1
    got = await client.get(f"/api/v1/workspaces/{b_ws.slug}/hosts/{b_host}", headers=b_ws.auth())
    assert got.json()["revokedAt"] is None, got.text


# ---- enrollment tokens and hosts over the API ----------------------------------------


async def test_token_lists_and_audit_never_hold_a_secret(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "nosecret")
    url = f"/api/v1/workspaces/{tenant.slug}/enrollment-tokens"
    secrets = []
    for name in ("plain", "=HYPERLINK(1)", "gua_enroll_deadbeef_" + "A" * 30):
        r = await client.post(url, json={"displayName": name}, headers=tenant.auth())
        assert r.status_code == 201, r.text
        secrets.append(r.json()["enrollmentToken"])
    # A display name that is itself a token's secret is redacted in the log, not stored.
    r = await client.post(url, json={"displayName": secrets[0]}, headers=tenant.auth())
    assert r.status_code == 201, r.text
    secrets.append(r.json()["enrollmentToken"])
    listed = await client.get(url, headers=tenant.auth())
    log = await client.get(f"/api/v1/workspaces/{tenant.slug}/audit-log", headers=tenant.auth())
    b, _ = await admin_browser(app, tenant)
    async with aclosing(b):
        page = await b.get(f"/w/{tenant.slug}/admin")
        audit_page = await b.get(f"/w/{tenant.slug}/admin/audit")
    for secret in secrets[1:]:
        for answer in (listed, log, page, audit_page):
            assert secret not in answer.text, answer.request.url
    assert secrets[0] not in log.text
    assert secrets[0] not in audit_page.text
    # Revoking twice, and revoking a claimed token, change nothing more.
    prefix = listed.json()["enrollmentTokens"][-1]["tokenPrefix"]
    assert secrets[0].startswith(prefix + "_")
    for _ in range(2):
        r = await client.delete(f"{url}/{prefix}", headers=tenant.auth())
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "revoked", r.text
    claimed = await client.post(
        "/agent/v1/enrollments/claim", json={"enrollmentToken": secrets[1], "hostname": "h"}
    )
    assert claimed.status_code == 201, claimed.text
    claimed_prefix = secrets[1][: len(prefix)]
    r = await client.delete(f"{url}/{claimed_prefix}", headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "claimed", r.text
    # A revoked token is refused at the claim.
    r = await client.post("/agent/v1/enrollments/claim", json={"enrollmentToken": secrets[0]})
    refused(r, 401)


async def test_repeated_host_revokes_keep_the_first_time(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "rerevoke")
    host = await enroll(client, tenant, "twice")
    url = f"/api/v1/workspaces/{tenant.slug}/hosts/{host['hostId']}/revoke"
    first = await client.post(url, headers=tenant.auth())
    second = await client.post(url, headers=tenant.auth())
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    assert first.json()["revokedAt"] == second.json()["revokedAt"]
    r = await client.post(
        "/agent/v1/observations",
        json={},
        headers={"Authorization": f"Bearer {host['agentToken']}"},
    )
    refused(r, 401)


# ---- the audit log --------------------------------------------------------------------


async def test_audit_cursors_and_filters_stay_in_their_workspace(
    app: Any, client: httpx.AsyncClient
) -> None:
    a = await make_tenant(app, "aua")
    b = await make_tenant(app, "aub")
    await client.post(
        f"/api/v1/workspaces/{b.slug}/enrollment-tokens",
        json={"displayName": "b-secret-name"},
        headers=b.auth(),
    )
    newest_b = await scalar(app, "SELECT max(id) FROM audit_events")
    base = f"/api/v1/workspaces/{a.slug}/audit-log"
    for query in (
        f"cursor={int(newest_b) + 1}",
        "cursor=9223372036854775807",
        "limit=500&from=0001-01-01T00:00Z&to=9999-12-31T23:59Z",
    ):
        r = await client.get(f"{base}?{query}", headers=a.auth())
        assert r.status_code == 200, (query, r.text)
        assert "b-secret-name" not in r.text, query
        assert b.slug not in r.text, query
    for query in (
        "cursor=9223372036854775808",
        "cursor=99999999999999999999",
        "cursor=-1",
        "cursor=%EF%BC%91",
        "cursor=" + "1" * 40,
        "limit=0",
        "limit=501",
        "from=2026-01-01T00:00",
        "from=2026-01-02T00:00Z&to=2026-01-01T00:00Z",
        "from=x",
    ):
        r = await client.get(f"{base}?{query}", headers=a.auth())
        refused(r, 422)
    for role in ("member", "finance"):
        refused(await client.get(base, headers=a.auth(role)), 403)
    refused(await client.get(f"/api/v1/workspaces/{b.slug}/audit-log", headers=a.auth()), 404)
    browser_a, _ = await admin_browser(app, a)
    async with aclosing(browser_a):
        for cursor in ("9223372036854775808", "x", "-1", "1" * 40):
            r = await browser_a.get(f"/w/{a.slug}/admin/audit?cursor={cursor}")
            assert r.status_code == 422, (cursor, r.status_code)
        r = await browser_a.get(f"/w/{a.slug}/admin/audit?cursor={int(newest_b) + 1}")
        assert r.status_code == 200
        assert "b-secret-name" not in r.text


# ---- /metrics ------------------------------------------------------------------------


async def test_metrics_hold_no_tenant_text_and_bounded_labels(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "metricsws")
    host = await enroll(client, tenant, "metrics-secret-host")
    auth = {"Authorization": f"Bearer {host['agentToken']}"}
    for i in range(30):
        await client.post(
            "/agent/v1/observations",
            json={"observedAt": f"bad-{i}", "hostname": f'evil"\n{i}'},
            headers=auth,
        )
        await client.post(f"/api/v1/workspaces/{tenant.slug}/reports/x{i}", headers=tenant.auth())
    r = await client.get("/metrics")
    assert r.status_code == 200, r.text[:300]
    for text in (tenant.slug, "metrics-secret-host", "evil", "@", "bad-"):
        assert text not in r.text, text
    series = [line for line in r.text.splitlines() if line and not line.startswith("#")]
    reasons = {line for line in series if "observations_rejected" in line}
    assert len(reasons) < 30, reasons
    # From a public address, without the token: no metrics.
    public = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=("203.0.113.9", 4000)),
        base_url="http://board.test",
    )
    async with public:
        refused(await public.get("/metrics"), 403)


# ---- the CLI --------------------------------------------------------------------------


def cli(database_url: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [GUA_BOARD, *args],
        input=stdin,
        env={"GUA_BOARD_DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=120,
    )


def one_clean_line(done: subprocess.CompletedProcess[bytes]) -> str:
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 2, (done.returncode, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-2000:]
    assert not TOKEN.search(err + done.stdout.decode(errors="replace"))
    return lines[0]


async def test_cli_issue_token_refuses_odd_expiries(app: Any, database_url: str) -> None:
    """Was exit 0 for `--expires-in 0`: a token with the default lifetime."""
    await make_tenant(app, "cliexp", password=None)
    before = await token_rows(app, "cliexp")
    for hours in ("0", "-0", "-1", "nan", "inf", "721"):
        done = cli(database_url, "issue-token", "--workspace", "cliexp", f"--expires-in={hours}")
        one_clean_line(done)
    assert await token_rows(app, "cliexp") == before
    done = cli(database_url, "issue-token", "--workspace", "nope", "--expires-in", "1")
    one_clean_line(done)


async def test_cli_passwords_on_stdin_that_are_no_text_are_refused(
    app: Any, database_url: str
) -> None:
    """Was a traceback (UnicodeEncodeError) for a password that is not UTF-8."""
    await make_tenant(app, "clipw", password=None)
    before = int(await scalar(app, "SELECT count(*) FROM users"))
    for stdin in (b"\xff\xfe not utf-8 at all\n", b"caf\xe9-latin1-password\n"):
        done = cli(
            database_url,
            "create-user",
            "new@clipw.example",
            "--workspace",
            "clipw",
            "--role",
            "member",
            "--password-stdin",
            stdin=stdin,
        )
        one_clean_line(done)
        done = cli(
            database_url, "set-password", "admin@clipw.example", "--password-stdin", stdin=stdin
        )
        one_clean_line(done)
    assert int(await scalar(app, "SELECT count(*) FROM users")) == before
    for email in ("a\tb@x.example", "x" * 5000 + "@x.example", "no-at-sign", "a@b@c"):
        done = cli(database_url, "create-user", email, "--workspace", "clipw", "--role", "member")
        one_clean_line(done)
    for stdin in (b"", b"short\n"):
        done = cli(
            database_url, "set-password", "admin@clipw.example", "--password-stdin", stdin=stdin
        )
        one_clean_line(done)


def test_cli_serve_refuses_ports_and_worker_counts_that_are_none(database_url: str) -> None:
    """Was a served board: --port 99999 listened on 34463 (the port wrapped) while its log
    said 99999, and --workers 0 or -5 started one worker. Refused before anything runs,
    with a database that would let the board start (a served board never exits: the
    run's timeout is then the failure)."""
    for args in (
        ("serve", "--port", "99999"),
        ("serve", "--port", "-1"),
        ("serve", "--port", "65536"),
        ("serve", "--workers", "0"),
        ("serve", "--workers", "-5"),
        ("serve", "--workers", "1e3"),
        ("demo", "--port", "70000"),
        ("demo", "--interval", "0"),
        ("demo", "--interval", "nan"),
        ("demo", "--hosts", "-1"),
    ):
        done = subprocess.run(
            [GUA_BOARD, *args],
            env={"GUA_BOARD_DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            timeout=60,
        )
        err = done.stderr.decode(errors="replace")
        assert done.returncode == 2, (args, done.returncode, err[-500:])
        assert "Traceback" not in err, err[-2000:]
