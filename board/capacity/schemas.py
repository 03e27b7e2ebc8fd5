"""The capacity answer (board-api.md names `fits`, `candidates` and their fields)."""

from __future__ import annotations

from pydantic import Field

from board.readmodels import IsoTime, ReadModel
from board.reservations.availability import Availability


class CandidateGpu(ReadModel):
    uuid: str
    index: int
    name: str
    # Now: total minus used in the newest observation; for a range ahead, the card's
    # total (a booking has the whole card).
    free_memory_mb: int | None
    # Its availability now (accounting.md), also for a range ahead.
    availability: Availability
    memory_total_mb: int | None


class Candidate(ReadModel):
    host_id: str
    display_name: str
    gpus: list[CandidateGpu]


class CapacityOut(ReadModel):
    fits: bool
    candidates: list[Candidate]
    # The question as understood: null from and to are "now".
    gpus_wanted: int
    min_free_memory_mb: int
    from_: IsoTime | None = Field(alias="from")
    to: IsoTime | None
    same_host: bool
    model: str
