"""The time rules of a booking; each refusal is one sentence (a 422's detail)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from board.errors import Unprocessable

# A booking may start this far in the past (a form filled in a minute ago still works).
START_GRACE = timedelta(minutes=5)
# Nobody books further ahead than this.
HORIZON = timedelta(days=366)


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


def check_range(start: datetime, end: datetime, max_days: int, now: datetime) -> None:
    """A new range (or a moved one that has not started)."""
    if end <= start:
        raise Unprocessable(f"end ({end.isoformat()}) must be after start ({start.isoformat()}).")
    if end - start > timedelta(days=max_days):
        raise Unprocessable(
            f"A booking is at most {max_days} day(s) long (the workspace's "
            "maxReservationDays); this one is longer."
        )
    if start < now - START_GRACE:
        raise Unprocessable(
            f"start ({start.isoformat()}) is more than 5 minutes in the past; a booking "
            "cannot begin before now."
        )
    if start > now + HORIZON:
        raise Unprocessable("start is more than a year ahead.")
