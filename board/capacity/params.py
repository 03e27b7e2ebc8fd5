"""The capacity question's parameters, each refusal one sentence (a 422's detail).

Times: a time with its UTC offset, a local time (2026-12-05T09:00, the workspace's zone:
what a browser's date-and-time field sends) or a date (its local midnight). `from` and
`to` go together; without them the question is about now. A range that began already
is asked from now on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from board.errors import Unprocessable

MAX_GPUS = 1024
MAX_MEMORY_MB = 10_000_000
MAX_MODEL_CHARS = 100
HORIZON = timedelta(days=366)
_WHOLE = re.compile(r"^\d{1,12}$", re.ASCII)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)
_TIME = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}(:?\d{2})?)?$", re.ASCII
)
# "+01:00" in a query string that was not percent-encoded arrives as " 01:00".
_UNENCODED_PLUS = re.compile(r"^(?P<time>.+T[\d:.]+) (?P<offset>\d{2}(:?\d{2})?)$", re.ASCII)
TIME_HELP = (
    "a date (2026-12-05), a local time in the workspace's zone (2026-12-05T09:00) or a time "
    "with its UTC offset (2026-12-05T09:00:00Z)"
)


@dataclass(frozen=True)
class CapacityQuery:
    gpus: int = 1
    min_free_memory_mb: int = 0
    # None: now. Else [start, end), start not before now.
    start: datetime | None = None
    end: datetime | None = None
    same_host: bool = True
    model: str = ""


def _whole(label: str, value: str | None, default: int, low: int, high: int) -> int:
    if value is None or value.strip() == "":
        return default
    text = value.strip()
    if not _WHOLE.match(text) or not low <= int(text) <= high:
        raise Unprocessable(f"{label} must be a whole number from {low} to {high}.")
    return int(text)


def parse_time(label: str, value: str, zone: ZoneInfo) -> datetime:
    text = value.strip()
    fixed = _UNENCODED_PLUS.match(text)
    if fixed:
        text = f"{fixed['time']}+{fixed['offset']}"
    shown = value[:40]
    if not (_DATE.match(text) or _TIME.match(text)):
        raise Unprocessable(f"{label} {shown!r} is not {TIME_HELP}.")
    try:
        if _DATE.match(text):
            day = date.fromisoformat(text)
            moment = datetime(day.year, day.month, day.day, tzinfo=zone)
        else:
            moment = datetime.fromisoformat(text)
    except ValueError:
        raise Unprocessable(f"{label} {shown!r} is not a real date or time.") from None
    try:
        if moment.tzinfo is not None:
            return moment.astimezone(UTC)
        local = moment.replace(tzinfo=zone).astimezone(UTC)
        # A wall time the clocks skip (02:30 on a spring-forward night) is no instant.
        if local.astimezone(zone).replace(tzinfo=None) != moment:
            raise Unprocessable(f"{label} {shown} does not exist in {zone}: the clocks skip it.")
        return local
    except OverflowError:
        raise Unprocessable(f"{label} {shown!r} is out of range.") from None


def _flag(label: str, value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise Unprocessable(f"{label} must be true or false.")
    return text == "true"


def _model(value: str | None) -> str:
    text = (value or "").strip()
    if len(text) > MAX_MODEL_CHARS:
        raise Unprocessable(f"model is at most {MAX_MODEL_CHARS} characters.")
    if any(not c.isprintable() for c in text):
        raise Unprocessable("model must not contain line breaks or other control characters.")
    return text


def parse_capacity(
    *,
    gpus: str | None,
    min_free_memory_mb: str | None,
    from_: str | None,
    to: str | None,
    same_host: str | None,
    model: str | None,
    zone: ZoneInfo,
    now: datetime,
) -> CapacityQuery:
    count = _whole("gpus", gpus, 1, 1, MAX_GPUS)
    memory = _whole("minFreeMemoryMb", min_free_memory_mb, 0, 0, MAX_MEMORY_MB)
    given_from = from_ is not None and from_.strip() != ""
    given_to = to is not None and to.strip() != ""
    start = end = None
    if given_from != given_to:
        raise Unprocessable("from and to go together: give both for a range, or neither for now.")
    if given_from and given_to:
        assert from_ is not None
        assert to is not None
        start, end = parse_time("from", from_, zone), parse_time("to", to, zone)
        if end <= start:
            raise Unprocessable(f"to ({end.isoformat()}) must be after from ({start.isoformat()}).")
        if end <= now:
            raise Unprocessable("to is in the past: ask about now, or about a range ahead.")
        if end - start > HORIZON or start > now + HORIZON:
            raise Unprocessable("A range is at most 366 days long and starts within a year.")
        start = max(start, now)
    return CapacityQuery(
        gpus=count,
        min_free_memory_mb=memory,
        start=start,
        end=end,
        same_host=_flag("sameHost", same_host, True),
        model=_model(model),
    )
