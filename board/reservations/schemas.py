"""Reservations as the API reads and writes them (board-api.md names the fields)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

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


class ReservationList(ReadModel):
    reservations: list[ReservationOut]


class CalendarFeedOut(ReadModel):
    """A new secret feed URL, shown once (calendar apps subscribe to it without a token)."""

    feed_url: str
    token_prefix: str
