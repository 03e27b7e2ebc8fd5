"""Round 11 of the hunt: strings an attacker chooses, as they reach URLs the pages build and
the notices the board sends.

Each test asserts the behaviour the board must keep, and fails on the defect it names:

- Was: a member whose email holds a "/" (which the board takes: `x/y@lab.example`) could
  not be removed or signed out, neither on the admin page nor through the API (404: the
  page wrote the email into its form's path with Jinja's `urlencode`, which leaves "/"
  as it is, and the routes' `{email}` never matches a "/"). Worse, the Remove button of a
  member named `z/../member@lab.example` posted to `…/members/z/../member@…/remove`,
  which every browser (and httpx) resolves to `…/members/member@…/remove`: the admin who
  removed one person removed another.
- Was: a host name (the claim's hostname is the host's display name) with line breaks
  wrote lines of its own into every notice mail's text about that host: a fake
  "On the board: https://evil.example/…" link under the board's own headline, in a mail
  from the board. The Subject was already kept on one line; the body was not.

In process (the app and a real PostgreSQL, a real SMTP receiver on loopback).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from board.settings import Settings
from tests.board.builders import enroll, make_tenant
from tests.notices.conftest import notice_settings
from tests.notices.helpers import (
    add_channel,
    deliver_until,
    link_alice,
    notices_of,
    series,
    start_of_run,
)
from tests.notices.receivers import SmtpReceiver
from tests.web.helpers import csrf_of, sign_in

# ---- members whose email holds a "/" ------------------------------------------------------

_REMOVE = re.compile(
    r'<form method="post" action="([^"]+)" class="inline">\s*<input[^>]*>\s*'
    r'<button type="submit" class="danger" aria-label="Remove ([^"]+) from this workspace">'
)
_SIGN_OUT = re.compile(
    r'<form method="post" action="([^"]+)" class="inline">\s*<input[^>]*>\s*'
    r'<button type="submit" aria-label="Sign ([^"]+) out everywhere">'
)


async def members_of(client: httpx.AsyncClient, slug: str, auth: dict[str, str]) -> set[str]:
    r = await client.get(f"/api/v1/workspaces/{slug}/members", headers=auth)
    assert r.status_code == 200, r.text
    return {m["email"] for m in r.json()["members"]}


def buttons(html: str, pattern: re.Pattern[str]) -> dict[str, str]:
    """Each member's button's form action, by the member it names."""
    return {unescape(who): unescape(action) for action, who in pattern.findall(html)}


async def test_a_member_whose_email_holds_a_slash_is_the_one_removed(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "slash")
    slug = tenant.slug
    slashed, dotted, by_api = (
        "x/y@slash.example",
        "z/../member@slash.example",
        "p/q@slash.example",
    )
    for email in (slashed, dotted, by_api):
        r = await client.post(
            f"/api/v1/workspaces/{slug}/members",
            json={"email": email, "role": "member"},
            headers=tenant.auth(),
        )
        assert r.status_code == 201, r.text
    assert (await sign_in(client, "admin@slash.example")).status_code == 303
    page = await client.get(f"/w/{slug}/admin")
    assert page.status_code == 200, page.text
    csrf = csrf_of(page.text)
    removes = buttons(page.text, _REMOVE)
    sign_outs = buttons(page.text, _SIGN_OUT)
    assert {slashed, dotted} <= set(removes), removes

    problems = []
    # The dotted member's Remove button removes that member, and nobody else.
    r = await client.post(removes[dotted], data={"csrf_token": csrf})
    left = await members_of(client, slug, tenant.auth())
    if "member@slash.example" not in left:
        problems.append(
            f"Remove of {dotted!r} (POST {removes[dotted]}: {r.status_code}) "
            "removed member@slash.example instead"
        )
    if dotted in left:
        problems.append(f"Remove of {dotted!r} left it a member ({r.status_code})")
    # The slashed member can be signed out everywhere and removed from the page.
    r = await client.post(sign_outs[slashed], data={"csrf_token": csrf})
    if r.status_code != 303:
        problems.append(f"Sign out of {slashed!r}: POST {sign_outs[slashed]} {r.status_code}")
    r = await client.post(removes[slashed], data={"csrf_token": csrf})
    if r.status_code != 303 or slashed in await members_of(client, slug, tenant.auth()):
        problems.append(f"Remove of {slashed!r}: POST {removes[slashed]} {r.status_code}")
    # And through the API, with the "/" percent-encoded as a client must send it.
    path = f"/api/v1/workspaces/{slug}/members/{quote(by_api, safe='')}"
    r = await client.post(f"{path}/sign-out", headers=tenant.auth())
    if r.status_code != 204:
        problems.append(f"API sign-out of {by_api!r}: {r.status_code} {r.text[:100]}")
    r = await client.delete(path, headers=tenant.auth())
    if r.status_code != 204 or by_api in await members_of(client, slug, tenant.auth()):
        problems.append(f"API DELETE of {by_api!r}: {r.status_code} {r.text[:100]}")
    assert not problems, "\n".join(problems)


# ---- notice mail: a host name's line breaks ------------------------------------------------


@pytest.fixture
def smtp() -> Iterator[SmtpReceiver]:
    receiver = SmtpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture
def settings(database_url: str, tmp_path: Path, smtp: SmtpReceiver) -> Settings:
    return notice_settings(database_url, tmp_path / "data", smtp.url)


EVIL_LINK = "https://evil.example/login"


async def test_a_host_name_writes_no_lines_of_its_own_into_a_notice_mail(
    app: Any, client: httpx.AsyncClient, smtp: SmtpReceiver
) -> None:
    acme = await make_tenant(app, "acme")
    hostile = f"node-a\nOn the board: {EVIL_LINK}\r\nSnooze this GPU's notices: {EVIL_LINK}\u2028"
    agent = (await enroll(client, acme, hostile))["agentToken"]
    await link_alice(client, acme)
    await add_channel(client, acme, kind="email", emails=["ops@acme.example"])
    last = await series(client, agent, start_of_run(), 31, "idle_held")
    await notices_of(app).detect_once(last)

    async def mailed() -> bool:
        return len(smtp.messages) == 2

    await deliver_until(app, mailed, "the idle-held mails to the member and the channel")
    problems = []
    for rcpt, message in smtp.messages:
        payload = message.get_payload(decode=True)
        assert isinstance(payload, bytes), message.as_string()[:500]
        text = payload.decode(message.get_content_charset() or "utf-8")
        lines = re.split(r"\r\n|\r|\n|\u2028|\u2029|\x85", text)
        forged = [line for line in lines if EVIL_LINK in line and "node-a" not in line]
        if forged:
            problems.append(f"mail to {rcpt}: lines of the host name's making: {forged}")
        # The host's name is one line, "Host: node-a …".
        if not any(line.startswith("Host: node-a") and EVIL_LINK in line for line in lines):
            problems.append(f"mail to {rcpt}: the host name is not on its Host line: {text!r}")
    assert not problems, "\n".join(problems)
