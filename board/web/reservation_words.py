"""The reservations page's words: refusals and warnings as the form would say them.

The API's sentences are precise for programs (field names such as `hostId`, UTC
instants, a booking's id); the page says the same in the form's language: its labels,
local times in the workspace's zone written as its inputs take them, hosts and GPUs by
name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from board.errors import DomainError
from board.reservations.resolve import Overlap, UnknownGpu, UnknownHost
from board.reservations.rules import RangeRefused
from board.reservations.schemas import BusyGpu, ReservationOut

# How the page writes a time, and how its time inputs take one.
SHOWN = "%Y-%m-%d %H:%M"
# The API's field names, as the booking form labels them.
LABELS = {
    "hostId": "Host",
    "gpuUuids": "GPUs",
    "start": "Start",
    "end": "End",
    "note": "Note",
    "memberEmail": "For member",
}


def _plural(count: int, one: str) -> str:
    return f"{count} {one}" if count == 1 else f"{count} {one}s"


def confirmation(warnings: Iterable[BusyGpu]) -> str:
    """What "Book anyway" sends back: it confirms these people on these GPUs, no others
    (a form changed after the warning, or someone new on a GPU, is warned about again)."""
    seen = "|".join(f"{w.gpu_uuid}:{','.join(w.linux_users)}" for w in warnings)
    return hashlib.sha256(seen.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Words:
    zone: tzinfo
    host_names: dict[str, str]  # host public id -> display name
    gpu_indexes: dict[tuple[str, str], int]  # (host public id, GPU uuid) -> index

    @property
    def zone_name(self) -> str:
        return str(self.zone)

    def time(self, moment: datetime) -> str:
        return moment.astimezone(self.zone).strftime(SHOWN)

    def host(self, host_id: str) -> str:
        return self.host_names.get(host_id, "that host")

    def gpus(self, host_id: str, uuids: Iterable[str]) -> str:
        """ "GPU 0, GPU 3"; a GPU no longer listed (a revoked host's) is counted."""
        uuids = list(uuids)
        indexes = self.gpu_indexes
        known = sorted(indexes[(host_id, u)] for u in uuids if (host_id, u) in indexes)
        named = [f"GPU {i}" for i in known]
        if len(known) < len(uuids):
            named.append(_plural(len(uuids) - len(known), "other GPU"))
        return ", ".join(named)

    def booking_gpus(self, booking: ReservationOut) -> str:
        return self.gpus(booking.host_id, booking.gpu_uuids)

    def refusal(self, exc: DomainError, host_id: str = "", *, new_end: bool = False) -> str:
        """A refused booking or change as the form says it; other refusals are already
        plain sentences (a revoked host, a removed member) and pass unchanged."""
        if isinstance(exc, RangeRefused):
            return self._range(exc, new_end)
        if isinstance(exc, Overlap):
            verb = "is" if len(exc.gpu_uuids) == 1 else "are"
            gpus = self.gpus(exc.host_id, exc.gpu_uuids)
            return (
                f"{gpus} of {self.host(exc.host_id)} {verb} already booked by {exc.email} "
                f"from {self.time(exc.start)} to {self.time(exc.end)} ({self.zone_name})."
            )
        if isinstance(exc, UnknownHost):
            return "Host: pick one of this workspace's hosts from the list."
        if isinstance(exc, UnknownGpu):
            return f"GPUs: tick GPUs of {self.host(host_id)}, each once."
        return exc.detail

    def _range(self, exc: RangeRefused, new_end: bool) -> str:
        zone = self.zone_name
        if exc.reason == "reversed":
            if new_end:
                return f"New end must be after the booking's start ({self.time(exc.start)} {zone})."
            return "End must be after Start."
        if exc.reason == "too_long":
            return (
                f"A booking lasts at most {_plural(exc.max_days, 'day')} in this workspace; "
                f"End is later than that after Start."
            )
        if exc.reason == "past":
            return (
                f"Start ({self.time(exc.start)} {zone}) has passed; a booking starts now "
                f"({self.time(datetime.now(UTC))}) or later."
            )
        if exc.reason == "too_far":
            return "Start is more than a year ahead; book closer to the time."
        return (
            f"New end ({self.time(exc.end)} {zone}) has passed; a booking's past never "
            "changes. To end it now, cancel it."
        )
