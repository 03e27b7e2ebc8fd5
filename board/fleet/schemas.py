"""The hosts as the API shows them (`GET …/hosts`, `…/hosts/{hostId}`).

Attributes are snake_case (templates read `host.display_name`); the JSON keys are their
camelCase aliases, in declaration order: the field order here is the wire order.
"""

from __future__ import annotations

from dataclasses import dataclass

from board.hosts.schemas import CollectionStatus, Freshness, UsageState
from board.jobs.live import JobNow, JobNowOut
from board.readmodels import IsoTime, ReadModel
from board.reservations.availability import Availability
from board.reservations.schemas import ReservationOut


class ProcessOut(ReadModel):
    pid: int
    linux_user: str
    name: str
    type: str
    # null when the driver could not say (agents 1.8+ may send null).
    memory_used_mb: int | None
    # The scheduler job the process runs in, from its cgroup (our agent); else null.
    job_id: str | None = None


class _GpuFields(ReadModel):
    uuid: str
    index: int
    name: str
    # The counted state (what the rollups credit); the board derives it when the agent
    # sent none, and then reportedUsageState is null.
    usage_state: UsageState
    reported_usage_state: UsageState | None
    # Since when the GPU has been in its state (for active and idle-held, with the same
    # holders): the start of the unbroken run ending at its newest observation.
    state_since: IsoTime | None
    util_pct: int | None
    memory_used_mb: int | None
    memory_total_mb: int | None
    temperature_c: int | None
    power_w: int | None
    # accounting.md: the newest state against the booking in force now (and that booking).
    availability: Availability = "not_observed"
    reservation: ReservationOut | None = None
    # The scheduler job allocated this GPU now (board.jobs.live), null when none.
    job: JobNowOut | None = None


class GpuOut(_GpuFields):
    """A GPU with its processes, as admins and members see it."""

    processes: list[ProcessOut]

    @property
    def process_count(self) -> int:
        return len(self.processes)


class GpuProcessCountOut(_GpuFields):
    """A GPU as a role that may not see processes (finance) sees it: their number only."""

    processes: None = None
    process_count: int


class RejectedPushOut(ReadModel):
    """Pushes refused for one reason in the last 24 hours, with the newest detail."""

    reason: str
    count: int
    last_at: IsoTime
    last_detail: str


class HostOut(ReadModel):
    host_id: str
    display_name: str
    hostname: str | None
    freshness: Freshness
    last_seen_at: IsoTime | None
    last_received_at: IsoTime | None
    collection_status: CollectionStatus | None
    errors: list[str]
    agent_version: str | None
    driver_version: str | None
    token_prefix: str
    enrolled_at: IsoTime
    revoked_at: IsoTime | None
    rejected_pushes: list[RejectedPushOut]
    gpus: list[GpuOut | GpuProcessCountOut]


class HostListOut(ReadModel):
    hosts: list[HostOut]


@dataclass(frozen=True, slots=True)
class GpuNow:
    """A GPU's newest state as the fleet page draws it: the model newest_gpus built, not
    copied, with its compute holders and its availability beside it."""

    gpu: GpuOut
    holders: tuple[str, ...]
    availability: Availability
    reservation: ReservationOut | None
    job: JobNow | None = None


@dataclass(frozen=True, slots=True)
class HostNow:
    """A host as the hosts API shows it, but its GPUs in `gpus` (`host.gpus` is empty)."""

    host: HostOut
    gpus: list[GpuNow]
