"""Channels and deliveries, for the API and the admin page (admins only; routes check)."""

from __future__ import annotations

import base64
import math
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from board.auth.deps import WorkspaceContext
from board.auth.emails import mailable, plausible_email
from board.errors import Conflict, NotFound, TooManyRequests, Unprocessable
from board.notices.catchup import tell_open_episodes
from board.notices.events import DEFAULT_EVENTS, EVENT_TYPES, TEST_TYPE, enqueue
from board.notices.models import NoticeChannel, NoticeDelivery, NoticeEvent
from board.notices.schemas import ChannelIn, ChannelOut, CreatedChannel, DeliveryOut, QueuedTest
from board.notices.sealing import seal
from board.notices.urls import check_channel_url, redacted_url
from board.settings import Settings

MAX_CHANNELS = 50
DELIVERIES_SHOWN = 200
# "Send a test" is a person checking a channel: this many per channel, and per workspace,
# in any TEST_WINDOW. Beyond them a workspace could fill the outbox (and the delivery
# workers) with tests to a receiver that never answers.
TEST_WINDOW = timedelta(minutes=10)
TESTS_PER_CHANNEL = 5
TESTS_PER_WORKSPACE = 20
# The first key of pg_advisory_xact_lock(key, workspace): a workspace's channel and test
# counts are read and acted on under it, so concurrent requests cannot each see room for
# one more (30 at once stored 65 channels under a cap of 50). Two-key locks never meet
# the board's single-bigint ones (the detector's).
CONFIG_LOCK = 0x6E6F7463  # "notc"


class TestsLimited(TooManyRequests):
    """A test notice refused for now; `retry_after` (seconds) is when one may be queued."""

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


async def _lock_workspace_channels(session: AsyncSession, workspace_id: int) -> None:
    """Held until the request's transaction ends (commit or rollback)."""
    await session.execute(
        text("SELECT pg_advisory_xact_lock(:key, :ws)"),
        {"key": CONFIG_LOCK, "ws": workspace_id & 0x7FFFFFFF},
    )


def _shown_url(channel: NoticeChannel) -> str | None:
    if channel.kind == "slack":
        return f"https://{urlsplit(channel.url or '').hostname or '…'}/…"
    return redacted_url(channel.url) if channel.url else channel.url


def channel_view(channel: NoticeChannel) -> ChannelOut:
    return ChannelOut(
        channel_id=str(channel.public_id),
        kind=channel.kind,
        url=_shown_url(channel),
        emails=list(channel.emails),
        events=list(channel.events),
        created_at=channel.created_at,
    )


def _events(sent: list[str] | None) -> list[str]:
    if sent is None:
        return list(DEFAULT_EVENTS)
    unknown = sorted({e for e in sent if e not in EVENT_TYPES})
    if unknown:
        shown = ", ".join(repr(e[:60]) for e in unknown[:5])
        raise Unprocessable(f"events: unknown event type(s) {shown}.")
    if not sent:
        raise Unprocessable("events: name at least one event type.")
    return sorted(set(sent), key=EVENT_TYPES.index)


def _emails(sent: list[str] | None) -> list[str]:
    cleaned = sorted({e.strip().lower() for e in sent or []})
    if not cleaned:
        raise Unprocessable("emails: an email channel needs at least one address.")
    bad = [e for e in cleaned if not (plausible_email(e) and mailable(e))]
    if bad:
        raise Unprocessable(f"emails: {bad[0][:320]!r} is not an email address.")
    return cleaned


async def create_channel(
    session: AsyncSession, ctx: WorkspaceContext, body: ChannelIn, settings: Settings
) -> CreatedChannel:
    await _lock_workspace_channels(session, ctx.workspace_id)
    count = await session.scalar(
        text(
            "SELECT count(*) FROM notice_channels WHERE workspace_id = :ws AND deleted_at IS NULL"
        ),
        {"ws": ctx.workspace_id},
    )
    if (count or 0) >= MAX_CHANNELS:
        raise Conflict(f"A workspace has at most {MAX_CHANNELS} channels; remove one first.")
    events = _events(body.events)
    key = settings.resolved_secret_key()
    channel = NoticeChannel(
        workspace_id=ctx.workspace_id, public_id=uuid.uuid4(), kind=body.kind, events=events
    )
    secret = None
    if body.kind == "email":
        if body.url is not None:
            raise Unprocessable("url: an email channel takes emails, not a url.")
        channel.emails = _emails(body.emails)
    else:
        if body.emails is not None:
            raise Unprocessable(f"emails: a {body.kind} channel takes a url, not emails.")
        if not body.url:
            raise Unprocessable(f"url: a {body.kind} channel needs a url.")
        url = await check_channel_url(body.url.strip(), settings.allow_insecure_webhooks)
        channel.emails = []
        if body.kind == "webhook":
            channel.url = url
            # Standard Webhooks: whsec_ and base64 of 32 random bytes.
            secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
            channel.sealed_secret = seal(key, secret)
        else:
            # A Slack URL is its own credential: kept sealed, and its host in clear to show.
            channel.url = f"https://{urlsplit(url).hostname}/"
            channel.sealed_url = seal(key, url)
    session.add(channel)
    await session.flush()
    await session.refresh(channel)
    await tell_open_episodes(session, ctx.workspace_id, channel.id, events, datetime.now(UTC))
    return CreatedChannel(**channel_view(channel).model_dump(by_alias=False), secret=secret)


async def list_channels(session: AsyncSession, workspace_id: int) -> list[ChannelOut]:
    rows = await session.scalars(
        select(NoticeChannel)
        .where(NoticeChannel.workspace_id == workspace_id, NoticeChannel.deleted_at.is_(None))
        .order_by(NoticeChannel.created_at, NoticeChannel.id)
    )
    return [channel_view(c) for c in rows.all()]


def canonical_channel_id(channel_id: str) -> str:
    """A channel id as the board writes it (uuid.UUID also reads upper case, braces and
    urn:uuid:, and such a spelling must not be audited as sent)."""
    try:
        return str(uuid.UUID(channel_id))
    except ValueError:
        raise NotFound("No such channel in this workspace.") from None


async def find_channel(session: AsyncSession, workspace_id: int, channel_id: str) -> NoticeChannel:
    try:
        public = uuid.UUID(channel_id)
    except ValueError:
        raise NotFound("No such channel in this workspace.") from None
    channel = await session.scalar(
        select(NoticeChannel).where(
            NoticeChannel.workspace_id == workspace_id,
            NoticeChannel.public_id == public,
            NoticeChannel.deleted_at.is_(None),
        )
    )
    if channel is None:
        raise NotFound("No such channel in this workspace.")
    return channel


async def remove_channel(session: AsyncSession, ctx: WorkspaceContext, channel_id: str) -> None:
    """The channel stops receiving now (its pending deliveries fail); its history stays."""
    channel = await find_channel(session, ctx.workspace_id, channel_id)
    channel.deleted_at = datetime.now(UTC)
    channel.sealed_secret = None
    channel.sealed_url = None


_RECENT_TESTS = text(
    """
    SELECT count(*) FILTER (WHERE d.channel_id = :channel),
           min(e.occurred_at) FILTER (WHERE d.channel_id = :channel),
           count(*), min(e.occurred_at)
    FROM notice_events e
    JOIN notice_deliveries d ON d.workspace_id = e.workspace_id AND d.event_id = e.id
    WHERE e.workspace_id = :ws AND e.type = 'test' AND e.occurred_at > :since
    """
)


async def _check_test_allowed(
    session: AsyncSession, workspace_id: int, channel_id: int, now: datetime
) -> None:
    """A TestsLimited when the channel, or the workspace, had its tests of the window.
    Removed channels' tests still count towards the workspace's."""
    row = (
        await session.execute(
            _RECENT_TESTS, {"ws": workspace_id, "channel": channel_id, "since": now - TEST_WINDOW}
        )
    ).one()
    on_channel, channel_oldest, in_workspace, workspace_oldest = row
    minutes = int(TEST_WINDOW.total_seconds() // 60)
    if on_channel >= TESTS_PER_CHANNEL:
        oldest, detail = (
            channel_oldest,
            f"This channel was sent {TESTS_PER_CHANNEL} test notices in the last "
            f"{minutes} minutes, the most it may be sent",
        )
    elif in_workspace >= TESTS_PER_WORKSPACE:
        oldest, detail = (
            workspace_oldest,
            f"This workspace sent {TESTS_PER_WORKSPACE} test notices in the last "
            f"{minutes} minutes, the most it may send",
        )
    else:
        return
    wait = max(1, math.ceil((oldest + TEST_WINDOW - now).total_seconds()))
    raise TestsLimited(f"{detail}; try again in {wait} seconds.", wait)


async def send_test(session: AsyncSession, ctx: WorkspaceContext, channel_id: str) -> QueuedTest:
    channel = await find_channel(session, ctx.workspace_id, channel_id)
    await _lock_workspace_channels(session, ctx.workspace_id)
    now = datetime.now(UTC)
    await _check_test_allowed(session, ctx.workspace_id, channel.id, now)
    data = {
        "workspace": {"slug": ctx.workspace.slug, "name": ctx.workspace.name},
        "channelId": str(channel.public_id),
        "requestedBy": ctx.email,
    }
    event_id = await enqueue(
        session, ctx.workspace_id, TEST_TYPE, data, now, channel_ids=[channel.id]
    )
    delivery_id = await session.scalar(
        select(NoticeDelivery.id).where(
            NoticeDelivery.workspace_id == ctx.workspace_id, NoticeDelivery.event_id == event_id
        )
    )
    assert delivery_id is not None
    return QueuedTest(event_id=str(event_id), delivery_id=delivery_id, status="pending")


_DELIVERIES = text(
    """
    SELECT d.id, d.event_id, e.type, c.public_id, d.kind, d.recipient, d.status, d.attempts,
           d.created_at, d.last_attempt_at, d.next_attempt_at, d.delivered_at,
           d.response_status, d.response
    FROM notice_deliveries d
    JOIN notice_events e ON e.workspace_id = d.workspace_id AND e.id = d.event_id
    LEFT JOIN notice_channels c ON c.workspace_id = d.workspace_id AND c.id = d.channel_id
    WHERE d.workspace_id = :ws AND (CAST(:status AS text) IS NULL OR d.status = :status)
    ORDER BY d.id DESC
    LIMIT :limit
    """
)


async def list_deliveries(
    session: AsyncSession, workspace_id: int, status: str | None = None
) -> list[DeliveryOut]:
    """The newest deliveries first (at most DELIVERIES_SHOWN)."""
    rows = await session.execute(
        _DELIVERIES, {"ws": workspace_id, "status": status, "limit": DELIVERIES_SHOWN}
    )
    found = []
    for row in rows.all():
        (id_, event_id, type_, channel, kind, recipient, status_, attempts, *times) = row
        created, last, next_at, delivered, code, response = times
        found.append(
            DeliveryOut(
                delivery_id=id_,
                event_id=str(event_id),
                type=type_,
                channel_id=str(channel) if channel else None,
                kind=kind,
                recipient=None if recipient.startswith("channel:") else recipient,
                status=status_,
                attempts=attempts,
                created_at=created,
                last_attempt_at=last,
                next_attempt_at=next_at if status_ == "pending" else None,
                delivered_at=delivered,
                response_status=code,
                response=response,
            )
        )
    return found


async def retry_delivery(session: AsyncSession, ctx: WorkspaceContext, delivery_id: int) -> None:
    """A failed delivery is tried again now; a delivered one never is (no second copy)."""
    status = await session.scalar(
        text(
            "SELECT status FROM notice_deliveries WHERE workspace_id = :ws AND id = :id FOR UPDATE"
        ),
        {"ws": ctx.workspace_id, "id": delivery_id},
    )
    if status is None:
        raise NotFound("No such delivery in this workspace.")
    if status != "failed":
        raise Conflict(f"Only a failed delivery can be retried; this one is {status}.")
    await session.execute(
        text(
            "UPDATE notice_deliveries SET status = 'pending', next_attempt_at = now(), "
            "attempts = 0 WHERE workspace_id = :ws AND id = :id"
        ),
        {"ws": ctx.workspace_id, "id": delivery_id},
    )


async def event_exists(session: AsyncSession, workspace_id: int, event_id: uuid.UUID) -> bool:
    found = await session.scalar(
        select(NoticeEvent.id).where(
            NoticeEvent.workspace_id == workspace_id, NoticeEvent.id == event_id
        )
    )
    return found is not None
