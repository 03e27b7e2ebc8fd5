"""Reservations as the API reads and writes them (board-api.md names the fields)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

from board.directory.schemas import LINUX_USER_PATTERN
from board.errors import NO_NUL
from board.readmodels import IsoTime, ReadModel

# A POSIX-ish account name: what `ps` shows (letters, digits, . _ -, maybe a trailing $).
LinuxUser = Annotated[str, StringConstraints(pattern=LINUX_USER_PATTERN)]
Note = Annotated[str, StringConstraints(max_length=500, pattern=NO_NUL)]
Uuidish = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=NO_NUL)]
Email = Annotated[str, StringConstraints(min_length=3, max_length=320, pattern=NO_NUL)]


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, extra="forbid")


class ReservationIn(_Body):
    host_id: Uuidish
    # All of the host's GPUs when absent.
    gpu_uuids: Annotated[list[Uuidish], Field(min_length=1, max_length=64)] | None = None
    start: datetime
    end: datetime
    note: Note | None = None
    # Admins may book for another member.
    member_email: Email | None = None
    # Default: the Linux users the directory links to the member.
    linux_users: Annotated[list[LinuxUser], Field(max_length=32)] | None = None


class ReservationPatch(_Body):
    """Move a booking that has not started, or shorten or extend one (never its past)."""

    start: datetime | None = None
    end: datetime | None = None
    note: Note | None = None


class ReservationOut(ReadModel):
    reservation_id: str
    host_id: str
    gpu_uuids: list[str]
    member_email: str
    linux_users: list[str]
    start: IsoTime
    end: IsoTime
    note: str


class BusyGpu(ReadModel):
    """A booked GPU that someone other than the booking's Linux users holds right now."""

    code: Literal["gpu_busy"] = "gpu_busy"
    gpu_uuid: str
    gpu_index: int
    state: Literal["active", "idle_held"]
    # Who holds it, not counting the booking's own Linux users (`unknown`: a held card
    # whose process the host could not name), and the members the directory links them to.
    linux_users: list[str]
    member_emails: list[str]
    detail: str


class ReservationCreated(ReservationOut):
    """A new booking, with a warning per booked GPU someone else is on when it starts soon."""

    warnings: list[BusyGpu] = []


class ReservationList(ReadModel):
    reservations: list[ReservationOut]


class CalendarFeedOut(ReadModel):
    """A new secret feed URL, shown once (calendar apps subscribe to it without a token)."""

    feed_url: str
    token_prefix: str
