"""The reports' groupings and buckets (the rest of their parameters, windows and zones,
are board.reportkit.params); 422 says why."""

from __future__ import annotations

from board.errors import Unprocessable

USAGE_KEYS = ("user", "team", "host", "gpu", "day", "month")
UTILIZATION_GROUPS = ("host", "gpu")
BUCKETS = ("hour", "day")


def parse_usage_group(value: str | None) -> tuple[str, ...]:
    raw = "user" if value is None or value.strip() == "" else value
    keys = tuple(part.strip() for part in raw.split(","))
    expected = (
        "user, team, host, gpu, day, month, or two of them joined by a comma (e.g. team,user)"
    )
    for key in keys:
        if key not in USAGE_KEYS:
            raise Unprocessable(f"groupBy {key!r} is unknown; use {expected}.")
    if len(keys) > 2:
        raise Unprocessable(f"groupBy takes at most two keys; use {expected}.")
    if len(set(keys)) != len(keys):
        raise Unprocessable(f"groupBy {raw!r} names a key twice; use {expected}.")
    return keys
