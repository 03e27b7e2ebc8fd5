"""The agent's live message (agent 1.6.0+): one `util` text frame a second.

Unlike snapshots, extra keys are ignored rather than refused: nothing of the stream
is stored, and a newer agent adding a field must not blank the live graphs.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

MAX_MESSAGE_CHARS = 64 * 1024
MAX_GPUS = 64
# 9999-12-31T23:59:59Z: a later ts has no date for browsers (datetime overflows), and a
# sample that cannot be shown broke every live stream that replayed it, and /latest.
MAX_TS = 253_402_300_799.0


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class UtilGpu(_Lenient):
    deviceUuid: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    utilPct: Annotated[int, Field(ge=0, le=100)]
    # The device's used memory, not clamped by the agent; only sanity-bounded here.
    memUsedMb: Annotated[int, Field(ge=0, le=2**31 - 1)]


class UtilMessage(_Lenient):
    type: Literal["util"]
    ts: float
    gpus: Annotated[list[UtilGpu], Field(max_length=MAX_GPUS)]

    @model_validator(mode="after")
    def _sane(self) -> Self:
        if not math.isfinite(self.ts) or not 0 < self.ts <= MAX_TS:
            raise ValueError("ts must be positive epoch seconds, at most year 9999")
        uuids = [g.deviceUuid for g in self.gpus]
        if len(set(uuids)) != len(uuids):
            raise ValueError("gpus[].deviceUuid must be unique")
        return self


def parse_util(text: str) -> UtilMessage | None:
    """The message, or None when it is not one the board can show."""
    if len(text) > MAX_MESSAGE_CHARS:
        return None
    try:
        return UtilMessage.model_validate_json(text)
    except ValidationError:
        return None
