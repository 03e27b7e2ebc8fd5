"""What people read: a notice as a mail and as a Slack message (the webhook gets the
event's JSON body itself)."""

from __future__ import annotations

from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from board.notices.budget_messages import BUDGET_HEADLINES, budget_headline

ALREADY_OPEN = "already open when this channel was added"


def one_line(text: str) -> str:
    """A header value or a printed name: every line break or other unprintable character
    (host, GPU and Linux user names come from hosts) as a space. The mail library refuses
    a header with any line break (one would stop every mail about that GPU), and in a body
    a name with line breaks wrote lines of its own ("On the board: <another link>")."""
    return "".join(c if c.isprintable() else " " for c in text)


# What a link keeps as it is: RFC 3986's unreserved and reserved characters (and `%`, so
# an escape stays one). Anything else, a space, `<`, `>`, `|`, `"` or a non-ASCII letter,
# is percent-encoded, so a link is one token: in Slack it cannot end early and start a
# mention or a link of its own, in mail it cannot carry text after it.
_LINK_SAFE = "!#$&'()*+,/:;=?@[]~%"


def link(url: object) -> str:
    """A link as printed: the board builds its links from ids, and this keeps one that
    was stored otherwise (an event queued before that rule) from becoming markup."""
    return quote(str(url), safe=_LINK_SAFE)


def _printed(value: object) -> object:
    """What a template prints: text on one line, whatever it holds; the templates' own
    line breaks are the only ones in a body."""
    return one_line(value) if isinstance(value, str) else value


_TEXT = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    undefined=StrictUndefined,
    autoescape=False,  # plain-text mail; Slack text is escaped by _slack_escape
    keep_trailing_newline=True,
    finalize=_printed,
)
_TEXT.filters["link"] = link

_HEADLINES = {
    "gpu.idle_held": "GPU idle-held",
    "gpu.idle_held.resolved": "GPU no longer idle-held",
    "reservation.idle": "Booked GPU sitting idle",
    "reservation.idle.resolved": "Booked GPU no longer idle",
    "host.stale": "Host stopped reporting",
    "host.stale.resolved": "Host reporting again",
    "host.error": "Host reports an error",
    "host.error.resolved": "Host error cleared",
    **BUDGET_HEADLINES,
    "gpu.missing": "GPU missing",
    "gpu.missing.resolved": "GPU reporting again",
    "gpu.hot": "GPU running hot",
    "gpu.hot.resolved": "GPU no longer hot",
    "job.idle": "Job's GPU unused",
    "job.idle.resolved": "Job's GPUs in use again",
    "digest.daily": "Daily digest",
    "test": "Test notice",
}
# Told as text (no GPU, no "since", no snooze link): the digest, tests, budget notices.
_TEXT_ONLY = ("digest.daily", "test", *BUDGET_HEADLINES)


def headline(body: dict[str, Any]) -> str:
    data = body.get("data", {})
    words = _HEADLINES.get(str(body.get("type")), str(body.get("type")))
    host = (data.get("host") or {}).get("displayName")
    gpu = data.get("gpu") or {}
    where = f"{host}, GPU {gpu.get('index')}" if host and gpu else host
    workspace = (data.get("workspace") or {}).get("name", "")
    if body.get("type") == "digest.daily":
        return f"{workspace}: daily digest for {data.get('day')}"
    if body.get("type") == "test":
        return f"{workspace}: test notice from GUA Board"
    if body.get("type") in BUDGET_HEADLINES:
        return budget_headline(body)
    users = ", ".join(data.get("linuxUsers") or [])
    job = data.get("job")
    if isinstance(job, dict):
        # "Job 4711 of alice: GPU unused or idle-held for 60 min on node-a, GPU 0".
        words = _job_words(str(body.get("type")), data)
        where = f"job {job.get('jobId')} on {where}"
    told = f"{words}: {where}" + (f" ({users})" if users else "")
    # Sent to a channel added while the episode was open (board.notices.catchup).
    return f"{told}, {ALREADY_OPEN}" if data.get("alreadyOpen") else told


def _job_words(event_type: str, data: dict[str, Any]) -> str:
    if event_type.endswith(".resolved"):
        return _HEADLINES.get(event_type, event_type)
    count = len(data.get("gpus") or []) or 1
    gpus = "GPU" if count == 1 else f"{count} GPUs"
    escalated = "Still wasted, " if data.get("escalated") else ""
    return f"{escalated}{gpus} of a job unused or idle-held"


def text_body(body: dict[str, Any], snooze_url: str | None) -> str:
    data = body.get("data", {})
    if body.get("type") == "digest.daily":
        return _TEXT.get_template("digest.txt").render(headline=headline(body), data=data)
    if body.get("type") == "test":
        return f"{one_line(headline(body))}\n\nThis channel works.\n"
    if body.get("type") in BUDGET_HEADLINES:
        return _TEXT.get_template("budget.txt").render(headline=headline(body), data=data)
    shown = {
        "workspace": data.get("workspace", {}),
        "host": data.get("host", {}),
        "gpu": data.get("gpu"),
        "linuxUsers": data.get("linuxUsers", []),
        "reservation": data.get("reservation"),
        "job": data.get("job"),
        "gpus": data.get("gpus") or [],
        "since": data.get("since", ""),
        "endedAt": data.get("endedAt"),
        "url": data.get("url"),
    }
    return _TEXT.get_template("notice.txt").render(
        headline=headline(body), data=shown, snooze_url=snooze_url
    )


def email(
    body: dict[str, Any], sender: str, to: list[str], event_id: str, snooze_url: str | None
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = ", ".join(to)
    message["Subject"] = one_line(headline(body))[:200]
    message["Message-ID"] = make_msgid(idstring=event_id.replace("-", ""))
    # The event id lets a mail filter, or a person, match a repeat to its first copy.
    message["X-Gua-Event-Id"] = event_id
    message.set_content(text_body(body, snooze_url))
    return message


def _slack_escape(value: object) -> str:
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_line(value: object) -> str:
    return _slack_escape(one_line(str(value)))


def _slack_link(url: str, label: str) -> str:
    """Slack's `<url|label>`; the url as one token (link), `&` escaped as Slack asks."""
    return f"<{_slack_escape(link(url))}|{label}>"


def slack(body: dict[str, Any], snooze_url: str | None) -> dict[str, Any]:
    """An incoming-webhook message: a readable line, the details, links to the GPU and
    to the snooze page. Every reported or member-written string is escaped (`& < >`), so
    it can form no mention (`<!channel>`) and no link; the digest goes as escaped text."""
    data = body.get("data", {})
    lines = [f"*{_slack_line(headline(body))}*"]
    if body.get("type") not in _TEXT_ONLY:
        lines.append(f"since {_slack_line(data.get('since', ''))}")
        booking = data.get("reservation")
        if booking:
            lines.append(f"booked by {_slack_line(booking.get('memberEmail'))}")
        if data.get("url"):
            lines.append(_slack_link(data["url"], "Open on the board"))
        if snooze_url:
            lines.append(_slack_link(snooze_url, "Snooze this GPU"))
    else:
        lines.append(_slack_escape(text_body(body, None)))
    return {"text": "\n".join(lines)}
