"""A host's freshness, exactly as accounting.md defines it."""

from __future__ import annotations

from datetime import datetime, timedelta

from board.hosts.schemas import Freshness


def freshness(
    latest_observed_at: datetime | None,
    collection_status: str | None,
    now: datetime,
    stale_after_seconds: int,
) -> Freshness:
    if latest_observed_at is None:
        return "never"
    if now - latest_observed_at > timedelta(seconds=stale_after_seconds):
        return "stale"
    if collection_status == "ok":
        return "ok"
    if collection_status == "partial":
        return "partial"
    return "error"
