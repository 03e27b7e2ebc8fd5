"""Snooze links: a signed, expiring token naming one GPU, usable without signing in.

The token carries internal ids only (workspace and GPU), signed with the board's secret
key; the page it opens shows nothing about the GPU, so a forwarded link reveals nothing
and can only silence that one GPU's notices for a while.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from board.errors import NotFound, Unprocessable

_SALT = "gua-board notice snooze"
LINK_MAX_AGE = timedelta(days=7)
# The choices offered on the page, in hours.
SNOOZE_HOURS = (1, 4, 24, 72, 168)


def snooze_token(secret: str, workspace_id: int, gpu_id: int) -> str:
    return str(URLSafeTimedSerializer(secret, salt=_SALT).dumps([workspace_id, gpu_id]))


def read_token(secret: str, token: str) -> tuple[int, int]:
    """(workspace id, gpu id), or a 404 for a link that is forged, expired or garbled."""
    if len(token) > 300:
        raise NotFound("This snooze link is not valid or has expired.")
    try:
        value = URLSafeTimedSerializer(secret, salt=_SALT).loads(
            token, max_age=int(LINK_MAX_AGE.total_seconds())
        )
    except BadSignature:
        raise NotFound("This snooze link is not valid or has expired.") from None
    if not (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise NotFound("This snooze link is not valid or has expired.")
    return value[0], value[1]


async def snooze(
    session: AsyncSession, secret: str, token: str, hours: int, now: datetime
) -> datetime:
    """Silence the GPU's notices until now + hours; returns until when."""
    workspace_id, gpu_id = read_token(secret, token)
    if hours not in SNOOZE_HOURS:
        raise Unprocessable(f"hours must be one of {', '.join(map(str, SNOOZE_HOURS))}.")
    until = now + timedelta(hours=hours)
    await session.execute(
        text(
            """
            INSERT INTO notice_snoozes (workspace_id, gpu_id, until)
            SELECT g.workspace_id, g.id, :until FROM gpus g
            WHERE g.workspace_id = :ws AND g.id = :gpu
            ON CONFLICT (workspace_id, gpu_id) DO UPDATE SET until = EXCLUDED.until
            """
        ),
        {"ws": workspace_id, "gpu": gpu_id, "until": until},
    )
    return until
