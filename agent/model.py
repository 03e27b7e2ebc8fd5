"""What one collection pass produced, before it becomes an `availability.snapshot.v1` payload."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

CollectionStatus = Literal["ok", "partial", "error"]
ProcessType = Literal["compute", "graphics"]
UsageState = Literal["active", "idle_held", "idle"]

UNKNOWN = "unknown"

# Error codes. The first two are the ones the released agent sends; the others are
# ours, short and stable, which the contract allows ("keep unknown codes").
ERROR_PROCESS_LIST_UNAVAILABLE = "process_list_unavailable"
ERROR_NVML_INIT_FAILED = "nvml_init_failed"
ERROR_GPU_ENUMERATION_FAILED = "gpu_enumeration_failed"
ERROR_GPU_UNAVAILABLE = "gpu_unavailable"
ERROR_MEMORY_INFO_UNAVAILABLE = "memory_info_unavailable"
ERROR_UTILIZATION_UNAVAILABLE = "utilization_unavailable"

# Utilization at or below this is "not computing" (the contract's 5 %).
IDLE_UTIL_PCT = 5


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """One process on one GPU."""

    pid: int
    linux_user: str
    name: str
    type: ProcessType
    memory_used_mb: int | None
    # The scheduler job the process runs in (Slurm's raw job id from its cgroup), or None.
    job_id: str | None = None


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one tick.

    `processes_ok` is False when the card's process list could not be read (its
    `processes` are then empty and it gets no usage state); `util_ok` is False when
    utilization could not be read (`util_pct` is then 0).
    """

    index: int
    uuid: str
    name: str
    memory_total_mb: int
    memory_used_mb: int
    util_pct: int
    temperature_c: int | None
    power_w: int | None
    processes: tuple[ProcessReading, ...] = ()
    processes_ok: bool = True
    util_ok: bool = True
    usage_state: UsageState | None = None
    # The device's minor number (/dev/nvidiaN) when NVML could say; only our agent sends it.
    minor_number: int | None = None

    @property
    def has_compute_process(self) -> bool:
        return any(p.type == "compute" for p in self.processes)


@dataclass(frozen=True, slots=True)
class Collection:
    """The result of reading all GPUs once, with the collection status the payload carries."""

    driver_version: str
    gpus: tuple[GpuReading, ...]
    status: CollectionStatus = "ok"
    errors: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        # The board rejects these combinations; catch them where they are made.
        if self.status == "ok" and self.errors:
            raise ValueError("an ok collection carries no errors")
        if self.status != "ok" and not self.errors:
            raise ValueError(f"a {self.status} collection needs at least one error code")

    @classmethod
    def failed(cls, *codes: str) -> Collection:
        """An `error` heartbeat: the host is alive but its GPUs could not be read."""
        return cls(driver_version=UNKNOWN, gpus=(), status="error", errors=codes)


@dataclass(frozen=True, slots=True)
class UtilReading:
    """One GPU's utilization and used memory for the live stream (no processes)."""

    uuid: str
    util_pct: int
    memory_used_mb: int
