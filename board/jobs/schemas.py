"""Job records on the wire (docs/jobs.md, "Job records"): what a node's agent and a bridge
on the scheduler's controller send, strictly checked, and the jobs list as read.

Both ways carry the same record; a node's names its own host only (`gpus`), a bridge's
names hosts by hostname (`allocations`). Once checked, a record becomes a
`board.jobs.records.JobRecord`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)

from board.errors import explained_pattern
from board.readmodels import IsoTime, ReadModel

MAX_JOBS = 1_000
MAX_GPUS_PER_HOST = 64
MAX_HOSTS_PER_JOB = 1_024
MAX_DEVICE = 65_535
MAX_TEXT = 200
MAX_USER = 64
# Times a record may carry: none before 2000, none more than a day ahead of the board.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
MAX_AHEAD = timedelta(days=1)

# Printable text: no line breaks (U+2028 and U+2029 too), no C0 or C1 control characters,
# no DEL, and no bidirectional overrides or isolates, which make a job or user read as
# another on the pages and in notices (Trojan Source, CVE-2021-42574; as team names,
# board.errors.NO_CONTROL_OR_BIDI).
_PRINTABLE = explained_pattern(
    r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]*$",
    "must not contain line breaks, other control characters or bidirectional control "
    "characters (U+202A-U+202E, U+2066-U+2069)",
)
# Slurm's states are upper-case words (PENDING, RUNNING, COMPLETED, OUT_OF_MEMORY, …);
# a newer Slurm's word that the board does not know yet is taken as it is.
STATE_PATTERN = explained_pattern(
    r"^[A-Z][A-Z0-9_]{0,31}$",
    "must be a Slurm job state: an upper-case word of at most 32 characters (RUNNING)",
)
SLURM_STATES = (
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETING",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
    "REQUEUED",
)
RAW_JOB_ID_PATTERN = explained_pattern(
    r"^[0-9]{1,20}$", "must be Slurm's own job id: 1 to 20 digits (squeue's job_id)"
)
# A hostname as a scheduler names a node: printable, no spaces, not starting with a dot.
HOSTNAME_PATTERN = explained_pattern(
    r"^[^\s.\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
    r"[^\s\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]*$",
    "must be a hostname: no spaces, control or bidirectional control characters, not "
    "starting with a dot",
)

Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT, pattern=_PRINTABLE)]
MaybeEmpty = Annotated[str, StringConstraints(max_length=MAX_TEXT, pattern=_PRINTABLE)]
User = Annotated[str, StringConstraints(min_length=1, max_length=MAX_USER, pattern=_PRINTABLE)]
State = Annotated[str, StringConstraints(pattern=STATE_PATTERN)]
RawJobId = Annotated[str, StringConstraints(pattern=RAW_JOB_ID_PATTERN)]
Hostname = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=HOSTNAME_PATTERN)]
Device = Annotated[int, Field(ge=0, le=MAX_DEVICE)]


def _unique_devices(devices: list[int]) -> list[int]:
    if len(set(devices)) != len(devices):
        raise ValueError("lists a device more than once")
    return devices


Devices = Annotated[
    list[Device],
    Field(max_length=MAX_GPUS_PER_HOST, json_schema_extra={"uniqueItems": True}),
    AfterValidator(_unique_devices),
]


def _moment(value: object) -> datetime:
    """ISO 8601 with a UTC offset, in UTC, from 2000 to a day ahead of now (a running
    job has no end yet: null)."""
    if not isinstance(value, str) or len(value) > 64:
        raise ValueError("must be an ISO 8601 time with a UTC offset (2026-12-04T21:13:46Z)")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO 8601 time") from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("must carry a UTC offset, e.g. 2026-12-04T21:13:46Z or +01:00")
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value!r} is out of range") from None
    if utc < EARLIEST:
        raise ValueError("is before 2000")
    if utc > datetime.now(UTC) + MAX_AHEAD:
        raise ValueError(
            "is more than a day ahead of the board's clock (a running job's endedAt is null)"
        )
    return utc


# Read by hand (strict models take no string for a datetime): the schema says a date-time.
Moment = Annotated[
    datetime,
    BeforeValidator(_moment),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class JobFields(_Strict):
    cluster: Name
    # The id people know the job by (`123_4` for an array task when the sender knows it).
    jobId: Name
    user: User
    account: MaybeEmpty
    partition: MaybeEmpty
    name: MaybeEmpty
    state: State
    startedAt: Moment
    # null while the job runs.
    endedAt: Moment | None
    # Slurm's own id of this run (squeue's job_id, the prolog's SLURM_JOB_ID); jobId when
    # absent.
    rawJobId: RawJobId | None = None
    # A requeued job's run number (squeue's restart_cnt, SLURM_JOB_RESTART_COUNT).
    restartCount: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0

    @model_validator(mode="after")
    def _ends_after_start(self) -> Self:
        if self.endedAt is not None and self.endedAt < self.startedAt:
            raise ValueError(
                f"endedAt ({self.endedAt.isoformat()}) is before startedAt "
                f"({self.startedAt.isoformat()})"
            )
        return self

    @property
    def run_key(self) -> tuple[str, str, int]:
        """(cluster, raw id, restart count): one run of one job."""
        return (self.cluster, self.raw_job_id, self.restartCount)

    @property
    def raw_job_id(self) -> str:
        return self.jobId if self.rawJobId is None else self.rawJobId


class AgentJobIn(JobFields):
    """A node's record of a job: the devices (Slurm's GRES IDX) it holds on this host."""

    gpus: Devices


class HostAllocationIn(_Strict):
    """The devices a job holds on one host, the host named as the scheduler names it."""

    hostname: Hostname
    gpus: Devices

    @property
    def short_name(self) -> str:
        return short_name(self.hostname)


def short_name(hostname: str) -> str:
    """`node1.cluster.local` -> `node1`: how a bridge's hostnames meet the board's hosts."""
    return hostname.split(".", 1)[0].lower()


class BridgeJobIn(JobFields):
    """A controller's record of a job: each host it names, by hostname. Omitted: the
    record names no host (an ended job's update keeps the allocations known)."""

    allocations: Annotated[list[HostAllocationIn], Field(max_length=MAX_HOSTS_PER_JOB)] = []

    @model_validator(mode="after")
    def _hosts_once(self) -> Self:
        names = [a.short_name for a in self.allocations]
        if len(set(names)) != len(names):
            raise ValueError("allocations names a host (by its short name) more than once")
        return self


J = TypeVar("J", bound=JobFields)


def _one_record_per_run(jobs: list[J]) -> list[J]:
    seen: set[tuple[str, str, int]] = set()
    for job in jobs:
        if job.run_key in seen:
            cluster, raw, restarts = job.run_key
            raise ValueError(
                f"holds two records of the same run (cluster {cluster!r}, rawJobId {raw!r}, "
                f"restartCount {restarts}); send one"
            )
        seen.add(job.run_key)
    return jobs


class AgentJobsIn(_Strict):
    jobs: Annotated[
        list[AgentJobIn],
        Field(max_length=MAX_JOBS),
        AfterValidator(_one_record_per_run),
    ]


class BridgeJobsIn(_Strict):
    jobs: Annotated[
        list[BridgeJobIn],
        Field(max_length=MAX_JOBS),
        AfterValidator(_one_record_per_run),
    ]


class JobsAccepted(ReadModel):
    accepted: int


# A bridge hears of every node; an answer names at most this many it could not match.
MAX_UNMATCHED_SHOWN = 100


class BridgeJobsAccepted(ReadModel):
    accepted: int
    # Hostnames (as sent) that matched no host of the workspace, or more than one; their
    # allocations were not stored. At most MAX_UNMATCHED_SHOWN.
    unmatched_hosts: list[str]


class JobGpuOut(ReadModel):
    device: int
    # The GPU the device is matched to now (minor number, else index); null: none known.
    gpu_uuid: str | None
    gpu_index: int | None


class JobAllocationOut(ReadModel):
    host_id: str
    display_name: str
    gpus: list[JobGpuOut]


class JobOut(ReadModel):
    cluster: str
    job_id: str
    raw_job_id: str
    restart_count: int
    user: str
    account: str
    partition: str
    name: str
    state: str
    started_at: IsoTime
    ended_at: IsoTime | None
    allocations: list[JobAllocationOut]


class JobList(ReadModel):
    jobs: list[JobOut]
    # More runs overlap the window than `limit`: narrow it, or filter.
    truncated: bool
