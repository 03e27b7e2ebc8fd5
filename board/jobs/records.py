"""A scheduler's job record as the board takes it, whichever way it came (a node's agent
or a bridge on the controller): validated on the wire (board.jobs.schemas), then this."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class HostAllocation:
    """The devices (Slurm's GRES IDX) a run holds on one host, as its record says."""

    host_id: int
    devices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One run of a job. `allocations` names the hosts this record speaks for: each
    replaces what was known of the run on that host; a host it does not name keeps its
    allocation (a node speaks for itself only; an ended job's squeue entry lists none)."""

    cluster: str
    raw_job_id: str
    restart_count: int
    job_id: str
    linux_user: str
    account: str
    partition: str
    name: str
    state: str
    started_at: datetime
    ended_at: datetime | None
    allocations: tuple[HostAllocation, ...]
