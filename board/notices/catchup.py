"""A channel added while conditions are open hears of them once, marked as already open.

Episodes are told when they open, to the channels that exist then; without this, a
channel added later would hear of a GPU idle-held for hours, or a host in error, only
when it ends (or never, if it never ends). So the channel is sent each open episode of
the events it listens to, in the transaction that adds it, with `data.alreadyOpen`
(mail and Slack say so in the headline: board.notices.messages.ALREADY_OPEN).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from board.notices.detect import LOCK_BASE
from board.notices.events import enqueue

# Told episodes only (a GPU snoozed when its episode opened was told nobody), and none
# of a GPU snoozed now.
_OPEN = text(
    """
    SELECT e.kind, e.gpu_id, e.data FROM notice_episodes e
    WHERE e.workspace_id = :ws AND e.closed_at IS NULL AND e.notified
      AND e.kind = ANY(:kinds)
      AND NOT EXISTS (
          SELECT 1 FROM notice_snoozes s
          WHERE s.workspace_id = e.workspace_id AND s.gpu_id = e.gpu_id AND s.until > :now
      )
    ORDER BY e.opened_at, e.id
    """
)


async def tell_open_episodes(
    session: AsyncSession, workspace_id: int, channel_id: int, events: list[str], now: datetime
) -> int:
    """Queue the open episodes for one new channel only; how many were queued.

    Waits for a detection pass in progress (its lock), so an episode it opens is either
    seen here or, once this transaction commits, sent to the channel by the pass itself.
    """
    await session.execute(
        text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_BASE + workspace_id}
    )
    rows = (
        await session.execute(_OPEN, {"ws": workspace_id, "kinds": list(events), "now": now})
    ).all()
    for kind, gpu_id, data in rows:
        await enqueue(
            session,
            workspace_id,
            kind,
            {**data, "alreadyOpen": True},
            now,
            gpu_id=gpu_id,
            channel_ids=[channel_id],
        )
    return len(rows)
