"""What a host wrote stays text in every medium: a GPU uuid, a host name or a Linux user
name holding Slack markup (`<!channel>`, `<https://…|label>`) or a forged "On the board:"
line reaches Slack escaped and mail on its own line, and the board's links are built
from ids (the host's id, the GPU index), never from the reported text."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from board.notices import messages
from tests.board.builders import Tenant, enroll, make_tenant, push
from tests.board.test_reports_builders import gpu, observation, proc
from tests.notices.helpers import (
    MINUTE,
    add_channel,
    deliver_until,
    deliveries,
    events,
    link_alice,
    notices_of,
    series,
    start_of_run,
)
from tests.notices.receivers import HttpReceiver, SmtpReceiver

S = timedelta(seconds=1)
HOSTILE_UUID = "GPU-9|Sign in again> <!channel> <https://evil.example/login"
HOSTILE_HOST = "node <!here> <https://evil.example/h|Open on the board>"
HOSTILE_USER = "<!channel>&<https://evil.example/u>"
HOSTILE_HOSTNAME = "n\nOn the board: https://evil.example/mail"
# A Slack link or mention: <…> with no angle bracket inside.
SLACK_TOKEN = re.compile(r"<([^<>]*)>")


async def _hostile_host(app: Any, client: Any) -> tuple[Tenant, str, datetime]:
    """A workspace whose host reports hostile names, its GPU 9 idle-held for 31 minutes;
    the workspace, the host's id and the last observation's time."""
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme, HOSTILE_HOST)
    t0 = (datetime.now(UTC) - timedelta(minutes=90)).replace(second=0, microsecond=0)
    for minute in range(32):
        card = gpu(9, util=0, state="idle_held", procs=[proc(HOSTILE_USER)])
        card["uuid"] = HOSTILE_UUID
        body = observation(t0 + minute * MINUTE, [card])
        body["host"]["hostname"] = HOSTILE_HOSTNAME
        r = await push(client, host["agentToken"], body)
        assert r.status_code == 202, r.text
    return acme, str(host["hostId"]), t0 + 31 * MINUTE


def _board_link(host_id: str) -> str:
    return f"http://board.test/w/acme/hosts/{host_id}#gpu-9"


def _slack_links(text: str) -> list[str]:
    """The links of a Slack text (asserting it holds no mention and no link to evil)."""
    assert "<!" not in text, text
    assert "<https://evil" not in text, text
    return [token.split("|", 1)[0] for token in SLACK_TOKEN.findall(text)]


async def test_hostile_names_reach_slack_mail_and_webhooks_as_text(
    app, client, smtp: SmtpReceiver, hook: HttpReceiver
) -> None:
    slack = HttpReceiver().start()
    try:
        acme, host_id, last = await _hostile_host(app, client)
        await add_channel(client, acme, kind="slack", url=slack.url)
        await add_channel(client, acme, kind="email", emails=["ops@acme.example"])
        made = await add_channel(client, acme, kind="webhook", url=hook.url)
        hook.secret = made["secret"]
        result = await notices_of(app).detect_once(last + 5 * S)
        assert result["acme"].opened == ["gpu.idle_held"]

        async def all_sent() -> bool:
            return bool(slack.delivered() and hook.delivered() and smtp.messages)

        await deliver_until(app, all_sent, "the notice to Slack, the webhook and the mail")
    finally:
        slack.stop()
    link = _board_link(host_id)

    text = slack.delivered()[0].json()["text"]
    board, snooze = _slack_links(text)
    assert board == link
    assert snooze.startswith("http://board.test/notices/snooze?token=")
    assert f"<{link}|Open on the board>" in text
    assert "&lt;!channel&gt;" in text  # shown, as text

    data = hook.delivered()[0].json()["data"]
    assert data["url"] == link
    assert data["gpu"]["uuid"] == HOSTILE_UUID  # the JSON carries the data as reported

    (_, mail), *_ = smtp.messages
    # One line (the mail library folds a long header; unfolded, no break is left).
    assert "\n" not in re.sub(r"\r?\n[ \t]", " ", str(mail["Subject"]))
    body = mail.get_payload(decode=True).decode()
    on_board = [line for line in body.splitlines() if line.startswith("On the board:")]
    assert on_board == [f"On the board: {link}"], body


async def test_the_daily_digest_escapes_what_hosts_wrote(app, client, smtp: SmtpReceiver) -> None:
    slack = HttpReceiver().start()
    try:
        acme, host_id, last = await _hostile_host(app, client)
        await add_channel(client, acme, kind="slack", url=slack.url, events=["digest.daily"])
        r = await client.patch(
            "/api/v1/workspaces/acme/settings", json={"digestHour": 0}, headers=acme.auth()
        )
        assert r.status_code == 200, r.text
        await notices_of(app).detect_once(last + 5 * S)
        assert await events(app, "digest.daily")

        async def sent() -> bool:
            mailed = any(rcpt == ["admin@acme.example"] for rcpt, _ in smtp.messages)
            return bool(slack.delivered()) and mailed

        await deliver_until(app, sent, "the digest to Slack and to the admin")
    finally:
        slack.stop()
    text = slack.delivered()[0].json()["text"]
    assert _slack_links(text) == []  # the digest on Slack is text: no link of any kind
    assert "&lt;!channel&gt;" in text
    mail = next(m for rcpt, m in smtp.messages if rcpt == ["admin@acme.example"])
    body = mail.get_payload(decode=True).decode()
    # A name is printed as text (on its own line's part); the only board link is the one
    # built from ids, whole.
    assert re.findall(r"http://board\.test\S*", body) == [_board_link(host_id)], body


def test_a_stored_link_with_markup_cannot_form_slack_markup_or_a_mail_line() -> None:
    """An event queued before links were built from ids may still carry a reported uuid in
    its URL: the link is shown as one token, its markup percent-encoded."""
    stored = f"http://board.test/w/acme/hosts/h1#gpu-{HOSTILE_UUID}"
    body = {
        "type": "gpu.idle_held",
        "timestamp": "2024-01-01T00:00:00+00:00",
        "data": {
            "workspace": {"slug": "acme", "name": "Acme"},
            "host": {"hostId": "h1", "displayName": HOSTILE_HOST, "hostname": None},
            "gpu": {"uuid": HOSTILE_UUID, "index": 9, "name": "A100"},
            "linuxUsers": [HOSTILE_USER],
            "since": "2024-01-01T00:00:00+00:00",
            "url": stored,
        },
    }
    text = messages.slack(body, None)["text"]
    (board,) = _slack_links(text)
    assert board.startswith("http://board.test/w/acme/hosts/h1#gpu-GPU-9%7C"), text
    mail = messages.text_body(body, None)
    (line,) = [x for x in mail.splitlines() if x.startswith("On the board:")]
    assert " " not in line.removeprefix("On the board: "), line
    assert "<" not in line


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


EVIL_LINK = "https://evil.example/login"


async def test_a_host_name_writes_no_lines_of_its_own_into_a_notice_mail(
    app: Any, client: httpx.AsyncClient, smtp: SmtpReceiver
) -> None:
    """Was: a host name (the claim's hostname is the host's display name) with line breaks
    wrote lines of its own into every notice mail's text about that host: a fake "On the
    board: https://evil.example/…" link under the board's own headline, in a mail from the
    board. The Subject was already kept on one line; the body was not."""
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
