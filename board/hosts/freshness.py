"""A host's freshness, exactly as accounting.md defines it."""

from __future__ import annotations

from datetime import datetime, timedelta

FRESHNESS = ("never", "ok", "partial", "error", "stale")


def freshness(
    latest_observed_at: datetime | None,
    collection_status: str | None,
    now: datetime,
    stale_after_seconds: int,
) -> str:
    if latest_observed_at is None:
        return "never"
    if now - latest_observed_at > timedelta(seconds=stale_after_seconds):
        return "stale"
    if collection_status in ("ok", "partial", "error"):
        return collection_status
    return "error"
