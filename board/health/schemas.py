"""Fleet health as the API reads and writes it: maintenance windows, retired GPUs."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints
from pydantic.alias_generators import to_camel

from board.errors import NO_CONTROL
from board.readmodels import IsoTime, ReadModel

Recurrence = Literal["none", "daily", "weekly"]
WindowNote = Annotated[str, StringConstraints(max_length=500, pattern=NO_CONTROL)]


class WindowIn(BaseModel):
    """`POST …/hosts/{hostId}/maintenance`: the first (or only) occurrence, and how it
    repeats; times with their zone offset."""

    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, extra="forbid")

    start: datetime
    end: datetime
    note: WindowNote | None = None
    recurrence: Recurrence = "none"
    # A recurring window's last occurrence starts before this (absent: no end).
    until: datetime | None = None


class WindowOut(ReadModel):
    window_id: str
    host_id: str
    start: IsoTime
    end: IsoTime
    recurrence: Recurrence
    # The zone a recurring window keeps its local times in (the workspace's when made).
    zone: str
    until: IsoTime | None
    note: str
    # The occurrence in force now, or the next one (null when none is left).
    next_start: IsoTime | None
    next_end: IsoTime | None
    in_force: bool


class WindowList(ReadModel):
    windows: list[WindowOut]


class RetiredGpuOut(ReadModel):
    host_id: str
    uuid: str
    index: int
    name: str
    retired_at: IsoTime
