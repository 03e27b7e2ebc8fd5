"""The delivery workers' side of the outbox: claim due deliveries, send, record.

A claim is one statement: due rows (pending and due, or sending with an expired lease)
are taken with FOR UPDATE SKIP LOCKED, so several workers in several board processes
never take the same row, and marked `sending` with a lease, committed before anything is
sent. The send happens outside any transaction; its outcome is recorded only if the row
is still this worker's claim (same attempt number). A process killed mid-send leaves
its row `sending`; once the lease expires another worker sends it again, with the same
webhook-id. So delivery is at least once, and a delivery recorded as delivered is never
sent again.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from cryptography.exceptions import InvalidTag
from standardwebhooks import Webhook

from board.auth.emails import mailable
from board.metrics.registry import notices_delivered, notices_failed
from board.notices import messages
from board.notices.sealing import unseal
from board.notices.senders import Outcome, backoff, parse_smtp_url, post_json, send_mail
from board.notices.snooze import snooze_token
from board.settings import Settings

# At most this many of one workspace's deliveries are being sent at once, counted over
# every board process (the unexpired claims in the table): a workspace whose receiver
# accepts and never answers holds its own few sends, never the others' (docs/notices.md).
PER_WORKSPACE = 4
# The first key of the two-key advisory lock claims are made under ("notd").
CLAIM_LOCK = 0x6E6F7464

# Fair by workspace: each workspace with due rows offers at most its room (PER_WORKSPACE
# less its live claims), oldest first and locked with SKIP LOCKED; of those, the first of
# every workspace come before any workspace's second, and so on, up to the limit.
_CLAIM = """
    WITH live AS (
        SELECT workspace_id, count(*) AS sending FROM notice_deliveries
        WHERE status = 'sending' AND lease_until >= now()
        GROUP BY workspace_id
    ), due AS (
        SELECT DISTINCT workspace_id FROM notice_deliveries
        WHERE (status = 'pending' AND next_attempt_at <= now())
           OR (status = 'sending' AND lease_until < now())
    ), offered AS (
        SELECT o.workspace_id, o.id, o.next_attempt_at,
               row_number() OVER (
                   PARTITION BY o.workspace_id ORDER BY o.next_attempt_at, o.id
               ) AS turn
        FROM due
        LEFT JOIN live ON live.workspace_id = due.workspace_id
        CROSS JOIN LATERAL (
            SELECT workspace_id, id, next_attempt_at FROM notice_deliveries d
            WHERE d.workspace_id = due.workspace_id
              AND ((d.status = 'pending' AND d.next_attempt_at <= now())
                   OR (d.status = 'sending' AND d.lease_until < now()))
            ORDER BY d.next_attempt_at, d.id
            LIMIT GREATEST(%(per_workspace)s - COALESCE(live.sending, 0), 0)
            FOR UPDATE SKIP LOCKED
        ) o
    ), taken AS (
        SELECT workspace_id, id FROM offered
        ORDER BY turn, next_attempt_at, id
        LIMIT %(limit)s
    )
    UPDATE notice_deliveries d
    SET status = 'sending', attempts = d.attempts + 1, last_attempt_at = now(),
        lease_until = now() + make_interval(secs => %(lease)s)
    FROM taken
    WHERE d.workspace_id = taken.workspace_id AND d.id = taken.id
    RETURNING d.workspace_id, d.id, d.attempts
"""

_CLAIMED = """
    SELECT d.workspace_id, d.id, d.attempts, d.kind, d.recipient, e.id, e.body, e.gpu_id,
           c.url, c.sealed_url, c.sealed_secret, c.emails, c.deleted_at,
           -- a person (not a channel) no longer in the workspace, nor a team's contact,
           -- gets nothing more of it
           (d.channel_id IS NULL AND NOT EXISTS (
               SELECT 1 FROM memberships m JOIN users u ON u.id = m.user_id
               WHERE m.workspace_id = d.workspace_id AND u.email = d.recipient
           ) AND NOT EXISTS (
               SELECT 1 FROM directory_teams t
               WHERE t.workspace_id = d.workspace_id AND t.contact_email = d.recipient
           )) AS person_left
    FROM notice_deliveries d
    JOIN notice_events e ON e.workspace_id = d.workspace_id AND e.id = d.event_id
    LEFT JOIN notice_channels c ON c.workspace_id = d.workspace_id AND c.id = d.channel_id
    WHERE d.id = ANY(%s)  -- identity values: unique across workspaces
"""


@dataclass(frozen=True)
class Claimed:
    workspace_id: int
    id: int
    attempts: int
    kind: str
    recipient: str
    event_id: uuid.UUID
    body: dict[str, Any]
    gpu_id: int | None
    url: str | None
    sealed_url: bytes | None
    sealed_secret: bytes | None
    emails: list[str]
    channel_removed: bool
    person_left: bool = False


async def claim(
    conn: psycopg.AsyncConnection[Any],
    limit: int,
    lease: float,
    per_workspace: int = PER_WORKSPACE,
) -> list[Claimed]:
    """Take up to `limit` due deliveries, fairly by workspace, none beyond a workspace's
    `per_workspace` sends at once (the connection is in autocommit)."""
    params = {"lease": lease, "limit": limit, "per_workspace": per_workspace}
    # Claims queue behind one lock (a claim takes milliseconds): two processes claiming at
    # once would each count the same live sends and together pass a workspace's share.
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", [CLAIM_LOCK])
        cur = await conn.execute(_CLAIM, params)
        keys = [id_ for _, id_, _ in await cur.fetchall()]
    if not keys:
        return []
    cur = await conn.execute(_CLAIMED, [keys])
    found = []
    for (
        ws,
        id_,
        attempts,
        kind,
        recipient,
        event_id,
        body,
        gpu_id,
        *channel,
    ) in await cur.fetchall():
        url, sealed_url, sealed_secret, emails, deleted_at, person_left = channel
        found.append(
            Claimed(
                ws,
                id_,
                attempts,
                kind,
                recipient,
                event_id,
                body if isinstance(body, dict) else json.loads(body),
                gpu_id,
                url,
                sealed_url,
                sealed_secret,
                list(emails or []),
                deleted_at is not None,
                bool(person_left),
            )
        )
    return found


def snooze_url(settings: Settings, delivery: Claimed) -> str | None:
    if delivery.gpu_id is None or not settings.public_url:
        return None
    token = snooze_token(settings.resolved_secret_key(), delivery.workspace_id, delivery.gpu_id)
    return f"{settings.public_url.rstrip('/')}/notices/snooze?token={token}"


def signed_headers(secret: str, event_id: str, payload: str) -> dict[str, str]:
    now = datetime.now(UTC)
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(event_id, now, payload),
    }


# A channel sealed under another secret key (docs/notices.md: add it again).
RESEALED = (
    "The channel was sealed under another secret key (GUA_BOARD_SECRET_KEY changed); "
    "remove it and add it again."
)


async def attempt(settings: Settings, delivery: Claimed) -> Outcome:
    """One try at one delivery, by its kind."""
    if delivery.channel_removed:
        return Outcome(False, response="The channel was removed.")
    if delivery.person_left:
        return Outcome(False, response="The person is no longer a member of this workspace.")
    secret_key = settings.resolved_secret_key()
    event_id = str(delivery.event_id)
    timeout = settings.notices_timeout_seconds
    allow = settings.allow_insecure_webhooks
    sealed = delivery.sealed_secret if delivery.kind == "webhook" else delivery.sealed_url
    try:
        opened = unseal(secret_key, sealed) if sealed is not None else None
    except InvalidTag:
        return Outcome(False, response=RESEALED)
    if delivery.kind == "webhook":
        assert delivery.url is not None
        assert opened is not None
        payload = json.dumps(delivery.body, separators=(",", ":"))
        headers = signed_headers(opened, event_id, payload)
        return await post_json(
            delivery.url, payload.encode(), headers, allow_insecure=allow, timeout=timeout
        )
    if delivery.kind == "slack":
        assert opened is not None
        message = messages.slack(delivery.body, snooze_url(settings, delivery))
        return await post_json(
            opened,
            json.dumps(message).encode(),
            {},
            allow_insecure=allow,
            timeout=timeout,
        )
    if settings.smtp_url is None:
        return Outcome(False, response="No mail server is configured (GUA_BOARD_SMTP_URL).")
    to = delivery.emails if delivery.recipient.startswith("channel:") else [delivery.recipient]
    # An address stored before the channel rule (or a member's) that mail would read as
    # another address, or as none, is left out rather than mailed elsewhere.
    to = [address for address in to if mailable(address)]
    if not to:
        return Outcome(False, response="No address here is one mail can go to as written.")
    mail = messages.email(
        delivery.body, settings.mail_from, to, event_id, snooze_url(settings, delivery)
    )
    return await send_mail(parse_smtp_url(settings.smtp_url.get_secret_value()), mail, timeout)


_RECORD = """
    UPDATE notice_deliveries
    SET status = %(status)s, lease_until = NULL, response_status = %(code)s,
        response = %(response)s,
        delivered_at = CASE WHEN %(status)s = 'delivered' THEN now() END,
        next_attempt_at = now() + make_interval(secs => %(delay)s)
    WHERE workspace_id = %(ws)s AND id = %(id)s AND status = 'sending'
      AND attempts = %(attempts)s
"""


async def record(
    conn: psycopg.AsyncConnection[Any], settings: Settings, delivery: Claimed, outcome: Outcome
) -> str:
    """Keep the outcome (if the claim is still ours); returns the new status."""
    if outcome.delivered:
        status, delay = "delivered", 0.0
        notices_delivered.labels(channel=delivery.kind).inc()
    elif outcome.retry and delivery.attempts < settings.notices_max_attempts:
        status = "pending"
        delay = backoff(delivery.attempts, settings.notices_retry_base_seconds, outcome.retry_after)
    else:
        status, delay = "failed", 0.0
        notices_failed.labels(channel=delivery.kind).inc()
    await conn.execute(
        _RECORD,
        {
            "status": status,
            "code": outcome.status,
            "response": outcome.response,
            "delay": delay,
            "ws": delivery.workspace_id,
            "id": delivery.id,
            "attempts": delivery.attempts,
        },
    )
    return status
