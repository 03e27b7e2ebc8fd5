"""Times in a reservation query string: a date (UTC midnight) or a time with an offset."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

from board.errors import Unprocessable

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def parse_moment(label: str, value: str | None) -> datetime | None:
    if value is None or value.strip() == "":
        return None
    value = value.strip().replace(" ", "+")  # an unencoded "+01:00" arrives as " 01:00"
    try:
        if _DATE.match(value):
            day = date.fromisoformat(value)
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise Unprocessable(
            f"{label} {value!r} is neither a date (2026-11-01) nor an ISO 8601 time "
            "with an offset (2026-11-01T06:00:00Z)."
        ) from None
    if moment.tzinfo is None:
        raise Unprocessable(f"{label} {value!r} has no UTC offset; add one (e.g. Z).")
    try:
        return moment.astimezone(UTC)
    except (OverflowError, ValueError):
        raise Unprocessable(f"{label} {value!r} is out of range.") from None
