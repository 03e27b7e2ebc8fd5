"""The time rules of a booking; each refusal is one sentence (a 422's detail).

A refusal also carries its reason and times as attributes (never in the API's body), so
a page can say it in the form's own words: its labels, local times.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from board.errors import Unprocessable

# A booking may start this far in the past (a form filled in a minute ago still works).
START_GRACE = timedelta(minutes=5)
# Nobody books further ahead than this.
HORIZON = timedelta(days=366)

RangeReason = Literal["reversed", "too_long", "past", "too_far", "end_past"]


class RangeRefused(Unprocessable):
    """A refused range: the API's sentence, and what a page needs to say it its way."""

    def __init__(
        self, detail: str, reason: RangeReason, start: datetime, end: datetime, max_days: int = 0
    ) -> None:
        super().__init__(detail)
        self.reason: RangeReason = reason
        self.start = start
        self.end = end
        self.max_days = max_days


def aware(label: str, moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise Unprocessable(f"{label} {moment.isoformat()} has no UTC offset; add one (e.g. Z).")
    return moment


def whole_minute(label: str, moment: datetime) -> datetime:
    moment = aware(label, moment)
    if moment.second or moment.microsecond:
        raise Unprocessable(
            f"{label} {moment.isoformat()} is not on a whole minute; bookings start and end "
            "on whole minutes."
        )
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:00-12:00 is in year 10000 in UTC
        raise Unprocessable(f"{label} {moment.isoformat()} is out of range.") from None


def reversed_range(start: datetime, end: datetime) -> RangeRefused:
    return RangeRefused(
        f"end ({end.isoformat()}) must be after start ({start.isoformat()}).",
        "reversed",
        start,
        end,
    )


def too_long(start: datetime, end: datetime, max_days: int) -> RangeRefused:
    return RangeRefused(
        f"A booking is at most {max_days} day(s) long (the workspace's "
        "maxReservationDays); this one is longer.",
        "too_long",
        start,
        end,
        max_days,
    )


def check_range(start: datetime, end: datetime, max_days: int, now: datetime) -> None:
    """A new range (or a moved one that has not started)."""
    if end <= start:
        raise reversed_range(start, end)
    if end - start > timedelta(days=max_days):
        raise too_long(start, end, max_days)
    if start < now - START_GRACE:
        raise RangeRefused(
            f"start ({start.isoformat()}) is more than 5 minutes in the past; a booking "
            "cannot begin before now.",
            "past",
            start,
            end,
        )
    if start > now + HORIZON:
        raise RangeRefused("start is more than a year ahead.", "too_far", start, end)
