"""What no route should ever see: NUL in a URL, huge bodies before auth, Host redirects,
secrets in log lines."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from board.logs import RedactSecrets, redact
from tests.board.builders import make_tenant
from tests.web.helpers import sign_in


@pytest.mark.parametrize(
    "path",
    [
        "/w/%00/",
        "/w/acme/hosts/%00",
        "/api/v1/me/api-tokens/%00",
        "/api/v1/workspaces/acme/enrollment-tokens/%00",
        "/api/v1/workspaces/acme/reports/usage?tz=%00&from=2026-01-01&to=2026-01-02",
    ],
)
async def test_nul_in_a_url_is_a_400(app: Any, client: Any, path: str) -> None:
    acme = await make_tenant(app, "acme")
    for method in ("GET", "DELETE", "POST"):
        r = await client.request(method, path, headers=acme.auth())
        assert r.status_code == 400, (method, path, r.text)
        assert isinstance(r.json()["detail"], str)


async def test_a_huge_body_is_refused_before_it_is_read(app: Any, client: Any) -> None:
    limit = app.state.runtime.settings.max_body_bytes
    big = b"[" + b"1," * limit + b"1]"
    # No token at all: refused by size, from Content-Length, before auth or parsing.
    r = await client.post(
        "/api/v1/workspaces/acme/members",
        content=big,
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert str(limit) in r.json()["detail"]

    async def chunks() -> Any:
        for _ in range(4):
            yield b" " * limit

    # Streamed with no Content-Length: refused as soon as it passes the limit.
    r = await client.patch(
        "/api/v1/workspaces/acme/settings",
        content=chunks(),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 413


async def test_the_slash_redirect_is_relative(app: Any, client: Any) -> None:
    await make_tenant(app, "acme")
    await sign_in(client, "admin@acme.example")
    r = await client.get("/w/acme", headers={"Host": "evil.example"})
    assert r.status_code == 307
    assert r.headers["location"] == "/w/acme/"
    r = await client.get("/w/acme/hosts/", headers={"Host": "evil.example"})
    assert "evil.example" not in r.headers.get("location", "")


def test_log_lines_never_carry_a_secret(caplog: pytest.LogCaptureFixture) -> None:
    secret = "gua_agent_1a2b3c4d_" + "x" * 43
    assert secret not in redact(f"< authorization: Bearer {secret}")
    assert "gua_agent_1a2b3c4d" in redact(f"< authorization: Bearer {secret}")
    assert "s3cr3t" not in redact("cookie: gua_session=s3cr3t; theme=dark")
    assert "opaque" not in redact("Authorization: Bearer opaque")
    feed = "gua_cal_0a1b2c3d_" + "y" * 43  # a calendar feed's token, in its URL's query
    assert feed not in redact(f"GET /api/v1/calendar/reservations.ics?token={feed}")
    assert "gua_cal_0a1b2c3d" in redact(f"?token={feed}")
    record = logging.LogRecord("websockets.server", logging.DEBUG, "", 0, "< %s", (secret,), None)
    RedactSecrets().filter(record)
    assert secret not in record.getMessage()
