"""The agent payloads, exactly as agent-api.md defines them: strict, unknown fields rejected."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

SCHEMA_VERSION = "availability.snapshot.v1"
MAX_GPUS = 64
MAX_PROCESSES_PER_GPU = 512
MAX_ERRORS = 32

# PostgreSQL text cannot hold NUL, so a "\u0000" in any string is refused here (422)
# rather than failing the write (about 50 ns a string).
NO_NUL = r"^[^\x00]*$"
Str64 = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=NO_NUL)]
Str128 = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=NO_NUL)]
Str255 = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=NO_NUL)]
NonNegInt = Annotated[int, Field(ge=0, le=2**31 - 1)]
# What a scheduler calls a job and its cluster, as our own agent reads them from a
# process's cgroup: printable text, no control characters (C0, DEL, C1).
SchedulerName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")
]
# /dev/nvidiaN's N: NVIDIA's character devices have 8-bit minors today; 16 bits of room.
MinorNumber = Annotated[int, Field(ge=0, le=65535)]
# A card's memory, in MB: 1 TiB at most. The rollups keep MB x microseconds in bigint,
# summed per host and hour (64 cards) and per card and day; at 2**31-1 MB two pushes of
# 64 cards overflowed the host's hour (a 503, and its every later push), and one card
# for 72 minutes its day. 2**20 leaves a 25-hour local day of 64 cards within bigint.
MAX_CARD_MEMORY_MB = 2**20
# A card's draw, in W: no GPU draws 10 kW (the largest, about 1.2 kW). Above it a reading
# is a sensor's garbage or a hostile host's, and is taken as no reading (energy then
# partial, as for an unread sensor) rather than refusing the snapshot's good figures.
# The rollups keep W x microseconds in bigint: at 2**31-1 W eight cards overflowed their
# host's hour within nine minutes (a 503, and its every later push); at 10 kW 64 cards
# keep their host's hour, and a card its day, far within it.
MAX_POWER_W = 10_000


def _plausible_power(watts: int | None) -> int | None:
    return None if watts is None or watts > MAX_POWER_W else watts


PowerW = Annotated[NonNegInt | None, AfterValidator(_plausible_power)]


def _no_unit_separator(code: str) -> str:
    if "\x1f" in code:
        raise ValueError("an error code must not contain the unit separator (\\u001f)")
    return code


# A control character no agent sends; refused since error codes once travelled to
# PostgreSQL joined by it (kept: the contract's codes are stable identifiers).
ErrorCode = Annotated[Str64, AfterValidator(_no_unit_separator)]

UsageState = Literal["active", "idle_held", "idle"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ProcessIn(_Strict):
    pid: Annotated[int, Field(gt=0, le=2**31 - 1)]
    linuxUser: Str64
    name: Str255
    type: Literal["compute", "graphics"] | None = None
    # No upper bound: agents report per-process memory above the card's total.
    memoryUsedMb: Annotated[int, Field(ge=0, le=2**53)] | None
    # Only our own agent sends these (docs/agent-api.md): jobId is stored with the process
    # (board.jobs.crediting: whose a shared GPU is); cluster is checked, not stored.
    jobId: SchedulerName | None = None
    cluster: SchedulerName | None = None


class GpuIn(_Strict):
    index: Annotated[int, Field(ge=0, le=1023)]
    uuid: Str128
    name: Str255
    memoryTotalMb: Annotated[int, Field(gt=0, le=MAX_CARD_MEMORY_MB)]
    memoryUsedMb: NonNegInt
    utilPct: Annotated[int, Field(ge=0, le=100)]
    # Stored as smallint: no GPU reads 32,768 °C, and a bogus sensor value gets a 422
    # that says so instead of failing the write.
    temperatureC: Annotated[int, Field(ge=0, le=32767)] | None
    powerW: PowerW
    usageState: UsageState | None = None
    # Only our own agent sends it: what a scheduler's device numbers are matched against.
    minorNumber: MinorNumber | None = None
    # fail_fast: a list stops at its first bad entry. Otherwise 512 bad processes on each
    # of 64 cards (a 660 KB body) made 229,376 errors and a worker grow by ~300 MiB.
    processes: Annotated[list[ProcessIn], Field(max_length=MAX_PROCESSES_PER_GPU, fail_fast=True)]

    @model_validator(mode="after")
    def _memory_within_total(self) -> Self:
        if self.memoryUsedMb > self.memoryTotalMb:
            raise ValueError(
                f"memoryUsedMb ({self.memoryUsedMb}) exceeds memoryTotalMb ({self.memoryTotalMb})"
            )
        return self


class HostIn(_Strict):
    hostname: Str255
    agentVersion: Str64
    driverVersion: Str64
    hostId: Str128 | None = None
    displayName: Str255 | None = None


class SnapshotIn(_Strict):
    schemaVersion: str
    collectionStatus: Literal["ok", "partial", "error"]
    errors: Annotated[list[ErrorCode], Field(max_length=MAX_ERRORS, fail_fast=True)]
    observedAt: Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=NO_NUL)]
    host: HostIn
    gpus: Annotated[list[GpuIn], Field(max_length=MAX_GPUS)]

    @model_validator(mode="after")
    def _rules(self) -> Self:
        if self.schemaVersion != SCHEMA_VERSION:
            raise ValueError(f"schemaVersion must be {SCHEMA_VERSION!r}")
        if self.collectionStatus == "ok" and self.errors:
            raise ValueError("errors must be empty when collectionStatus is 'ok'")
        if self.collectionStatus != "ok" and not self.errors:
            raise ValueError(
                f"errors must name at least one code when collectionStatus is "
                f"{self.collectionStatus!r}"
            )
        uuids = [g.uuid for g in self.gpus]
        if len(set(uuids)) != len(uuids):
            raise ValueError("gpus[].uuid must be unique within a snapshot")
        parse_observed_at(self.observedAt)
        return self

    def observed_at(self) -> datetime:
        return parse_observed_at(self.observedAt)


def parse_observed_at(value: str) -> datetime:
    """ISO 8601 with an explicit UTC offset; a naive time is ambiguous and refused.

    Returned in UTC: Python accepts offsets up to a day, PostgreSQL only up to 15:59,
    and a time near year 1 or 9999 may not exist in UTC at all (refused here).
    """
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"observedAt {value!r} is not an ISO 8601 timestamp") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError("observedAt must carry a UTC offset, e.g. +00:00")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"observedAt {value!r} is out of range") from None
