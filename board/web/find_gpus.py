"""The "Find GPUs" form (on the fleet page and its results page) and its "Book these" links.

People type memory in GiB and times in the workspace's zone (the browser's date-and-time
field: 2026-12-05T09:00); the question itself is board.capacity's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from board.capacity.schemas import Candidate, CapacityOut
from board.errors import Unprocessable

MAX_GIB = 9765  # board.capacity.params.MAX_MEMORY_MB in GiB
_NUMBER = re.compile(r"^\d{1,5}(\.\d{1,3})?$", re.ASCII)
# What the booking page's time fields take (board.web.reservation_routes.TIME_PATTERN).
BOOKING_TIME = "%Y-%m-%d %H:%M"
# A booking made from "now" lasts this long unless the booker changes it.
DEFAULT_BOOKING = timedelta(hours=3)


@dataclass(frozen=True)
class FindForm:
    """The form's fields as typed (shown again with the answer, or with a refusal)."""

    gpus: str = "1"
    memory_gib: str = ""
    model: str = ""
    same_host: bool = True
    start: str = ""
    end: str = ""


def memory_mb(gib: str) -> str:
    """The form's GiB as the API's MiB (a refusal in the form's words)."""
    text = gib.strip()
    if not text:
        return ""
    if not _NUMBER.match(text) or float(text) > MAX_GIB:
        raise Unprocessable(f"Free memory is a number of GiB from 0 to {MAX_GIB}.")
    return str(int(float(text) * 1024))


def _booking_time(moment: datetime, zone: ZoneInfo) -> str:
    return moment.astimezone(zone).strftime(BOOKING_TIME)


def book_link(
    slug: str, candidate: Candidate, answer: CapacityOut, zone: ZoneInfo, now: datetime
) -> str:
    """The booking page with this host, these GPUs and the range filled in (now: from the
    current minute, for DEFAULT_BOOKING)."""
    start = answer.from_ or now.replace(second=0, microsecond=0)
    end = answer.to or start + DEFAULT_BOOKING
    # A range's ends on whole minutes, as bookings are: the start rounded up, the end down.
    if start.second or start.microsecond:
        start = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    end = end.replace(second=0, microsecond=0)
    query = [("host", candidate.host_id)]
    query += [("gpus", g.uuid) for g in candidate.gpus]
    query += [("start", _booking_time(start, zone)), ("end", _booking_time(end, zone))]
    return f"/w/{slug}/reservations?{urlencode(query)}#book"
