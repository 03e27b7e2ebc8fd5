"""One attempt to send: an HTTP POST (webhooks, Slack) or a mail. Each returns an Outcome
that says whether it arrived and, if not, whether trying again may help.

HTTP: the name is resolved and every address checked (board.notices.urls) before the
connection, which then goes to the checked address (TLS still verifies the name), so a
name cannot be pointed at a private address between the check and the send. Redirects
are not followed, the whole attempt has a deadline, and at most RESPONSE_READ bytes of
the answer are read as sent (never decompressed: a tiny gzip bomb would decode to
gigabytes), of which RESPONSE_KEPT characters are kept for the admin page.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import parsedate_to_datetime
from urllib.parse import unquote, urlsplit

import aiosmtplib
import httpx

from board.notices.urls import UrlRefused, parse_target, resolve

RESPONSE_READ = 64 * 1024
RESPONSE_KEPT = 500
MAX_DELAY_SECONDS = 3600.0


class _HostOnly(logging.Filter):
    """httpx logs each request's URL at INFO; a Slack URL's path is its credential and a
    webhook's query may hold one, so its line keeps the scheme and host only."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 2 and isinstance(args[1], httpx.URL):
            url = args[1]
            record.args = (args[0], f"{url.scheme}://{url.netloc.decode('ascii')}/…", *args[2:])
        return True


if not any(isinstance(f, _HostOnly) for f in logging.getLogger("httpx").filters):
    logging.getLogger("httpx").addFilter(_HostOnly())


@dataclass(frozen=True)
class Outcome:
    delivered: bool
    retry: bool = False
    status: int | None = None
    response: str = ""
    retry_after: float | None = None


def shown(text: str) -> str:
    """An answer as kept: printable, bounded."""
    cleaned = "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text)
    return cleaned[:RESPONSE_KEPT]


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # "²" and "١٢" are digits to str, not HTTP
        return min(float(value), MAX_DELAY_SECONDS)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, min((when - now).total_seconds(), MAX_DELAY_SECONDS))


def backoff(attempts: int, base: float, retry_after: float | None) -> float:
    """Seconds before the next attempt: exponential, with jitter (half fixed, half random),
    never sooner than the receiver's Retry-After, at most an hour."""
    ceiling = min(MAX_DELAY_SECONDS, base * 2 ** max(attempts - 1, 0))
    delay = ceiling / 2 + random.uniform(0, ceiling / 2)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return float(min(delay, MAX_DELAY_SECONDS))


async def post_json(
    url: str, body: bytes, headers: dict[str, str], *, allow_insecure: bool, timeout: float
) -> Outcome:
    try:
        target = parse_target(url, allow_insecure)
        address = await resolve(target, allow_insecure, timeout)
    except UrlRefused as exc:
        # A name that does not resolve now may later; an address refused stays refused.
        return Outcome(False, retry="resolve" in str(exc), response=shown(str(exc)))
    literal = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
    default_port = 443 if target.scheme == "https" else 80
    named = f"[{target.host}]" if ":" in target.host else target.host  # an IPv6 literal
    host_header = named if target.port == default_port else f"{named}:{target.port}"
    pinned = f"{target.scheme}://{literal}:{target.port}{target.path}"
    # The answer is read as sent, never decoded: a few hundred bytes gzipped twice (or
    # more) decode to gigabytes in one read. Identity is asked for; whatever comes is raw.
    sent_headers = {
        **headers,
        "Host": host_header,
        "Content-Type": "application/json",
        "Accept-Encoding": "identity",
    }
    try:
        async with (
            # httpx's timeout bounds each read; this bounds the whole attempt (a trickle).
            asyncio.timeout(timeout * 2),
            httpx.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False) as client,
            client.stream(
                "POST",
                pinned,
                content=body,
                headers=sent_headers,
                extensions={"sni_hostname": target.host},
            ) as answer,
        ):
            read = b""
            async for chunk in answer.aiter_raw():
                read += chunk
                if len(read) >= RESPONSE_READ:
                    break
            status = answer.status_code
            retry_after = retry_after_seconds(answer.headers.get("retry-after"), datetime.now(UTC))
    except (httpx.TimeoutException, TimeoutError):
        return Outcome(False, retry=True, response="No answer within the deadline.")
    except httpx.HTTPError as exc:
        return Outcome(
            False, retry=True, response=shown(f"Could not connect: {type(exc).__name__}.")
        )
    text = shown(read[:RESPONSE_READ].decode("utf-8", "replace"))
    if 200 <= status < 300:
        return Outcome(True, status=status, response=text)
    if status in (408, 429) or status >= 500:
        return Outcome(False, True, status, text, retry_after)
    if 300 <= status < 400:
        return Outcome(False, False, status, shown("A redirect; redirects are not followed."))
    return Outcome(False, False, status, text)


@dataclass(frozen=True)
class SmtpServer:
    host: str
    port: int
    tls: bool  # smtps: TLS from the start; smtp: STARTTLS when the server offers it
    username: str | None
    password: str | None


def parse_smtp_url(url: str) -> SmtpServer:
    parts = urlsplit(url)
    if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
        raise ValueError("GUA_BOARD_SMTP_URL must be smtp://host:port or smtps://host:port")
    tls = parts.scheme == "smtps"
    return SmtpServer(
        host=parts.hostname,
        port=parts.port or (465 if tls else 25),
        tls=tls,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
    )


async def send_mail(server: SmtpServer, message: EmailMessage, timeout: float) -> Outcome:
    try:
        async with asyncio.timeout(timeout * 3):
            _, answer = await aiosmtplib.send(
                message,
                hostname=server.host,
                port=server.port,
                username=server.username,
                password=server.password,
                use_tls=server.tls,
                start_tls=False if server.tls else None,
                timeout=timeout,
            )
    except ValueError as exc:
        # An address the mail library cannot put in an envelope: no retry will help.
        return Outcome(False, False, response=shown(f"Not an address mail can go to: {exc}"))
    except aiosmtplib.SMTPRecipientsRefused as exc:
        return Outcome(False, False, response=shown(f"Recipients refused: {exc}"))
    except aiosmtplib.SMTPResponseException as exc:
        # 4xx: the server asks to try later; 5xx: it will not take this mail.
        return Outcome(False, 400 <= exc.code < 500, exc.code, shown(exc.message))
    except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
        return Outcome(
            False, True, response=shown(f"Mail server unreachable: {type(exc).__name__}.")
        )
    return Outcome(True, status=250, response=shown(answer))
