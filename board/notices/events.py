"""Event types and the outbox: a notice is an event row plus one delivery row per channel
or person, written in the caller's transaction (the one that decided the notice), so a
notice is never decided without being queued, nor queued without being decided.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

CONDITION_TYPES = (
    "gpu.idle_held",
    "reservation.idle",
    "host.stale",
    "host.error",
    "gpu.missing",
    "gpu.hot",
    "job.idle",
)
# Told once per team and period each, never resolved (board/notices/budget_watch.py).
BUDGET_TYPES = ("budget.warning", "budget.exceeded")
EVENT_TYPES = (
    *CONDITION_TYPES,
    *(f"{t}.resolved" for t in CONDITION_TYPES),
    *BUDGET_TYPES,
    "digest.daily",
)
# A channel made without a list of events hears these (the digest is asked for by name).
DEFAULT_EVENTS = tuple(t for t in EVENT_TYPES if t != "digest.daily")
TEST_TYPE = "test"


def iso(moment: datetime) -> str:
    return moment.isoformat()


async def enqueue(
    session: AsyncSession,
    workspace_id: int,
    event_type: str,
    data: dict[str, Any],
    occurred_at: datetime,
    *,
    gpu_id: int | None = None,
    people: Iterable[str] = (),
    channel_ids: Iterable[int] | None = None,
) -> uuid.UUID:
    """Write one event and its deliveries; returns the event id (the webhook-id).

    `people`: addresses mailed directly (holders, bookers, admins); the caller passes
    none when the board has no mail server. `channel_ids`: only these channels (a test),
    else every live channel of the workspace that listens to the type.
    """
    event_id = uuid.uuid4()
    body = {"type": event_type, "timestamp": iso(occurred_at), "data": data}
    await session.execute(
        text(
            "INSERT INTO notice_events (id, workspace_id, type, occurred_at, body, gpu_id) "
            "VALUES (:id, :ws, :type, :at, CAST(:body AS jsonb), :gpu)"
        ),
        {
            "id": event_id,
            "ws": workspace_id,
            "type": event_type,
            "at": occurred_at,
            "body": json.dumps(body, separators=(",", ":")),
            "gpu": gpu_id,
        },
    )
    if channel_ids is None:
        channels = await session.execute(
            text(
                "SELECT id, kind FROM notice_channels WHERE workspace_id = :ws "
                "AND deleted_at IS NULL AND :type = ANY(events) ORDER BY id"
            ),
            {"ws": workspace_id, "type": event_type},
        )
    else:
        channels = await session.execute(
            text(
                "SELECT id, kind FROM notice_channels WHERE workspace_id = :ws "
                "AND deleted_at IS NULL AND id = ANY(:ids) ORDER BY id"
            ),
            {"ws": workspace_id, "ids": list(channel_ids)},
        )
    rows = [(kind, f"channel:{channel_id}", channel_id) for channel_id, kind in channels.all()]
    rows += [("email", address, None) for address in sorted({p.lower() for p in people if p})]
    for kind, recipient, channel_id in rows:
        await session.execute(
            text(
                "INSERT INTO notice_deliveries "
                "(workspace_id, event_id, channel_id, kind, recipient) "
                "VALUES (:ws, :event, :channel, :kind, :recipient) "
                "ON CONFLICT (workspace_id, event_id, kind, recipient) DO NOTHING"
            ),
            {
                "ws": workspace_id,
                "event": event_id,
                "channel": channel_id,
                "kind": kind,
                "recipient": recipient,
            },
        )
    return event_id
