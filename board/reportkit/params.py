"""Report parameters: windows on whole hours, zones, formats, choices; 422 says why.
(Each report's own groupings are its package's: board.reports.groupings.)

Rollups are kept per UTC hour, so a report can only cut time on UTC hour boundaries.
A local day is the UTC hours that *start* on that local date (the hour-start rule). In
a zone a whole number of hours from UTC that is exactly midnight to midnight (a DST
day simply has 23 or 25 hours); in one that is not (Asia/Kolkata, +05:30), it is the
first UTC hour starting at or after midnight up to the next day's: 00:30 to 00:30 in
Kolkata. Every hour belongs to exactly one local date, so days tile any window without
gaps or overlaps and sum to it exactly. A date in `from`/`to` means its day's first
instant under the same rule.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cached_property

from board.errors import Unprocessable, explained_missing
from board.zones import iana_zone

MAX_WINDOW_DAYS = 400
FORMATS = ("json", "csv")

# ASCII digits only; an offset's minutes are 00-59 (Python reads "+14:60" as +15:00).
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)
_TIME = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}(:\d{2}(:\d{2}(\.\d{1,6})?)?)?"
    r"(?P<offset>Z|[+-]\d{2}(:?[0-5]\d)?)?$",
    re.ASCII,
)
# "+01:00" in a query string that was not percent-encoded arrives as " 01:00".
_UNENCODED_PLUS = re.compile(r"^(?P<time>.+T[\d:.]+) (?P<offset>\d{2}(:?\d{2})?)$", re.ASCII)
HOUR = timedelta(hours=1)
# The instants a report bound may name: the years around any real data, with room for
# the day and zone arithmetic of the reports (a year-1 or year-9999 bound overflows it).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Universal", "Zulu", "Etc/Zulu"})


@dataclass(frozen=True)
class Window:
    """[start, end) in UTC, on whole hours, and the zone that days are cut in."""

    start: datetime
    end: datetime
    tz_name: str
    tz: zoneinfo.ZoneInfo

    def local(self, moment: datetime) -> datetime:
        return moment.astimezone(self.tz)

    def day_start(self, day: date) -> datetime:
        """The first instant of a local date's hours, in UTC: its midnight (or the end of
        a DST jump over it), raised to the next whole UTC hour where it is not on one."""
        return first_hour(day, self.tz)

    def day_of(self, moment: datetime) -> date:
        """The local date whose hours hold `moment`: the date its UTC hour starts on."""
        hour = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        return self.local(hour).date()

    def last_day(self) -> date:
        """The local date of the window's last hour."""
        return self.day_of(self.end - HOUR)

    def hour_alignment(self) -> str | None:
        """What a local day is here when that is not midnight to midnight: a sentence
        for the reports' `hourAlignment`; None in a zone a whole number of hours from
        UTC all through the window (DST included)."""
        if all(offset % HOUR == timedelta(0) for _, offset in self.changes):
            return None
        begins: dict[str, None] = {}
        day = self.day_of(self.start)
        while day <= self.day_of(self.end):
            start = self.local(self.day_start(day))
            offset = start.utcoffset() or timedelta(0)
            since = start - start.replace(hour=0, minute=0, second=0)
            begins[f"{_clock(since)} ({_utc(offset)})"] = None
            day += timedelta(days=1)
        return (
            f"Rollups are kept per UTC hour and {self.tz_name} is not a whole number of "
            "hours from UTC, so each local day is the UTC hours that start on it: a day "
            f"begins at {' or '.join(begins)} local time, and so does a date in from or to."
        )

    @cached_property
    def changes(self) -> list[tuple[datetime, timedelta]]:
        """The zone's UTC offset at the start and at every hour of the window it changes."""
        if self.tz_name in _UTC_NAMES:
            return [(self.start, timedelta(0))]
        found: list[tuple[datetime, timedelta]] = []
        moment = self.start
        while moment < self.end:
            offset = moment.astimezone(self.tz).utcoffset() or timedelta(0)
            if not found or found[-1][1] != offset:
                found.append((moment, offset))
            moment += HOUR
        return found

    def days_are_utc_days(self) -> bool:
        """Whether a local day in this window is exactly a UTC day (offset 0 throughout)."""
        return all(offset == timedelta(0) for _, offset in self.changes)

    def days_across_months(self, d0: datetime, d1: datetime) -> tuple[datetime, ...]:
        """The UTC days in [d0, d1) whose hours start on dates of two local months (the
        last or first UTC day of a month wherever local days are not UTC days)."""
        if self.days_are_utc_days():
            return ()
        found = []
        day = d0
        while day < d1:
            first, last = self.day_of(day), self.day_of(day + timedelta(hours=23))
            if (first.year, first.month) != (last.year, last.month):
                found.append(day)
            day += timedelta(days=1)
        return tuple(found)

    def hours_off_noon(
        self, d0: datetime, d1: datetime, skipped: set[datetime], by_month: bool
    ) -> tuple[tuple[datetime, datetime], ...]:
        """The hours of the UTC days in [d0, d1), but the `skipped` ones, that start on
        another local date (`by_month`: in another local month) than their day's noon
        (12:00 UTC), as [lo, hi) ranges: where a day row standing at its noon would
        count them on the wrong day (month)."""

        def key(moment: datetime) -> tuple[int, ...]:
            day = self.day_of(moment)
            return (day.year, day.month) if by_month else (day.year, day.month, day.day)

        found: list[tuple[datetime, datetime]] = []
        day = d0
        while day < d1:
            noon = key(day + 12 * HOUR)
            # A UTC day's hours fall on at most two local dates (months), in order: the
            # hours before the noon's, or after it, are one run at an end of the day.
            if day not in skipped and not key(day) == key(day + 23 * HOUR) == noon:
                hours = [day + n * HOUR for n in range(24)]
                off = [h for h in hours if key(h) != noon]
                found.append((off[0], off[-1] + HOUR))
            day += timedelta(days=1)
        return tuple(found)

    def whole_utc_days(self, day_keyed: bool) -> tuple[datetime, datetime]:
        """[d0, d1): the whole UTC days inside the window that day rollups may serve.

        Empty (d0 == d1) when the report cuts local days that are not UTC days.
        """
        if day_keyed and not self.days_are_utc_days():
            return self.start, self.start
        first = self.start.replace(hour=0)
        d0 = first if first == self.start else first + timedelta(days=1)
        d1 = self.end.replace(hour=0)
        return (d0, d1) if d0 < d1 else (self.start, self.start)


DEFAULT_ZONE = "UTC"


def _clock(since_midnight: timedelta) -> str:
    """00:30, or 00:15:30 where there are seconds (Africa/Monrovia until 1972)."""
    seconds = int(since_midnight.total_seconds())
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}"
    return text + (f":{seconds % 60:02d}" if seconds % 60 else "")


def _utc(offset: timedelta) -> str:
    """UTC+05:30, UTC-03:30."""
    sign = "-" if offset < timedelta(0) else "+"
    return f"UTC{sign}{_clock(abs(offset))}"


def first_hour(day: date, tz: zoneinfo.ZoneInfo) -> datetime:
    """A local date's first instant under the hour-start rule, in UTC: its midnight, or
    the first whole UTC hour after it where midnight is not on one (OverflowError at
    the calendar's ends)."""
    midnight = datetime(day.year, day.month, day.day, tzinfo=tz).astimezone(UTC)
    floor = midnight.replace(minute=0, second=0, microsecond=0)
    return floor if floor == midnight else floor + HOUR


def day_now(tz: zoneinfo.ZoneInfo, now: datetime | None = None) -> date:
    """Today under the hour-start rule: the local date the current UTC hour starts on
    (until 00:30 in Asia/Kolkata, yesterday: the hour began at 23:30)."""
    hour = (now or datetime.now(UTC)).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return hour.astimezone(tz).date()


def parse_zone(name: str | None) -> tuple[str, zoneinfo.ZoneInfo]:
    name = DEFAULT_ZONE if name is None or name == "" else name
    try:
        return name, iana_zone(name)
    except ValueError:
        raise Unprocessable(
            f"tz {name!r} is not an IANA time zone (e.g. UTC, Europe/Berlin, America/New_York)."
        ) from None


def _required(label: str) -> str:
    return (
        f"{label} is required: a date (2026-11-01) or a time on a whole hour "
        "(2026-11-01T06:00:00Z)."
    )


# A report has no default window: `from` and `to` are required query parameters (routes
# declare them so), and a request without one gets this sentence.
FROM = explained_missing("from", _required("from"))
TO = explained_missing("to", _required("to"))
BOUND_HELP = (
    "A date (its day's first hour in the report's zone) or a time with a UTC offset on a "
    "whole UTC hour; the window is [from, to), at most 400 days."
)


def parse_bound(label: str, value: str | None, tz_name: str, tz: zoneinfo.ZoneInfo) -> datetime:
    """A date (its first hour in tz: Window.day_start) or a time with an offset on a
    whole UTC hour, as UTC."""
    if value is None or value.strip() == "":
        raise Unprocessable(_required(label))
    value = value.strip()
    if _DATE.match(value):
        try:
            day = date.fromisoformat(value)
        except ValueError:
            raise Unprocessable(f"{label} {value!r} is not a real date.") from None
        try:
            moment = first_hour(day, tz)
        except OverflowError:
            raise _out_of_range(label, value) from None
        _check_range(label, value, moment)
        return moment
    fixed = _UNENCODED_PLUS.match(value)
    if fixed:
        value = f"{fixed['time']}+{fixed['offset']}"
    match = _TIME.match(value)
    if not match:
        raise Unprocessable(
            f"{label} {value!r} is neither a date (2026-11-01) nor an ISO 8601 time "
            "(2026-11-01T06:00:00Z)."
        )
    if match["offset"] is None:
        raise Unprocessable(
            f"{label} {value!r} has no UTC offset; add one (e.g. {value}Z or {value}+01:00) "
            "or pass a date."
        )
    try:
        moment = datetime.fromisoformat(value).astimezone(UTC)
    except ValueError:
        raise Unprocessable(f"{label} {value!r} is not a real time.") from None
    except OverflowError:
        raise _out_of_range(label, value) from None
    _check_range(label, value, moment)
    if moment.minute or moment.second or moment.microsecond:
        raise Unprocessable(
            f"{label} {value} is not on a whole hour ({moment.isoformat()} in UTC); reports "
            "are kept per hour, so use a time like "
            f"{moment.replace(minute=0, second=0, microsecond=0).isoformat()}."
        )
    return moment


def _out_of_range(label: str, value: str) -> Unprocessable:
    return Unprocessable(
        f"{label} {value!r} is out of range; a report covers times from "
        f"{EARLIEST.date().isoformat()} to {LATEST.date().isoformat()}."
    )


def _check_range(label: str, value: str, moment: datetime) -> None:
    if not EARLIEST <= moment <= LATEST:
        raise _out_of_range(label, value)


def parse_window(from_: str | None, to: str | None, tz: str | None) -> Window:
    tz_name, zone = parse_zone(tz)
    start = parse_bound("from", from_, tz_name, zone)
    end = parse_bound("to", to, tz_name, zone)
    if end <= start:
        raise Unprocessable(
            f"to ({end.isoformat()}) must be after from ({start.isoformat()}); "
            "the window is [from, to)."
        )
    # Wall-clock length, so 400 local days across a DST change are still 400 days.
    wall = end.astimezone(zone).replace(tzinfo=None) - start.astimezone(zone).replace(tzinfo=None)
    if wall > timedelta(days=MAX_WINDOW_DAYS):
        raise Unprocessable(
            f"The window is {wall.days} days long; a report covers at most {MAX_WINDOW_DAYS} days."
        )
    return Window(start=start, end=end, tz_name=tz_name, tz=zone)


def local_day_hour(day: date, zone: str) -> str:
    """A local date as a report bound in UTC: the same instant as passing the date."""
    _, tz = parse_zone(zone)
    return first_hour(day, tz).isoformat()


def parse_choice(label: str, value: str | None, choices: tuple[str, ...], default: str) -> str:
    chosen = default if value is None or value.strip() == "" else value.strip()
    if chosen not in choices:
        raise Unprocessable(
            f"{label} {chosen!r} is unknown; use {' or '.join(repr(c) for c in choices)}."
        )
    return chosen
