"""What the hosts domain itself answers: freshness and states, a revoked host.

The hosts as people see them (newest GPUs, availability, rejections) are board.fleet's.
"""

from __future__ import annotations

from typing import Literal

from board.readmodels import IsoTime, ReadModel

Freshness = Literal["never", "ok", "partial", "error", "stale"]
CollectionStatus = Literal["ok", "partial", "error"]
UsageState = Literal["active", "idle_held", "idle"]


class RevokedHostOut(ReadModel):
    host_id: str
    revoked_at: IsoTime | None
