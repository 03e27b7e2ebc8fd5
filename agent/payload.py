"""The `availability.snapshot.v1` payload, key for key as the released agent builds it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent.model import UNKNOWN, Collection, GpuReading, ProcessReading

SCHEMA_VERSION = "availability.snapshot.v1"


@dataclass(frozen=True, slots=True)
class HostIdentity:
    """The `host` object of a payload (apart from the driver version, which comes from NVML)."""

    hostname: str
    agent_version: str
    host_id: str | None = None
    display_name: str | None = None


def build_observation(
    collection: Collection, host: HostIdentity, observed_at: datetime
) -> dict[str, Any]:
    """Build the payload dict for one tick; `observed_at` must be timezone-aware."""
    if observed_at.tzinfo is None:
        raise ValueError("observed_at must be timezone-aware")
    host_obj: dict[str, Any] = {
        "hostname": host.hostname or UNKNOWN,
        "agentVersion": host.agent_version,
        "driverVersion": collection.driver_version or UNKNOWN,
    }
    if host.host_id is not None:
        host_obj["hostId"] = host.host_id
    if host.display_name is not None:
        host_obj["displayName"] = host.display_name
    return {
        "schemaVersion": SCHEMA_VERSION,
        "collectionStatus": collection.status,
        "observedAt": observed_at.astimezone(UTC).isoformat(),
        "host": host_obj,
        "gpus": [_gpu(g) for g in collection.gpus],
        "errors": list(collection.errors),
    }


def encode_observation(payload: dict[str, Any]) -> bytes:
    """Serialise a payload the way the released agent does (`json.dumps` defaults, UTF-8)."""
    return json.dumps(payload).encode("utf-8")


def _gpu(gpu: GpuReading) -> dict[str, Any]:
    # Clamped so one odd reading cannot get the whole snapshot rejected (422).
    total = max(1, gpu.memory_total_mb)
    out: dict[str, Any] = {
        "index": max(0, gpu.index),
        "uuid": gpu.uuid,
        "name": gpu.name or UNKNOWN,
        "memoryTotalMb": total,
        "utilPct": min(100, max(0, gpu.util_pct)),
        "memoryUsedMb": min(total, max(0, gpu.memory_used_mb)),
        "temperatureC": _non_negative(gpu.temperature_c),
        "powerW": _non_negative(gpu.power_w),
        "processes": [_process(p) for p in gpu.processes if p.pid > 0],
    }
    if gpu.usage_state is not None:
        out["usageState"] = gpu.usage_state
    return out


def _process(proc: ProcessReading) -> dict[str, Any]:
    return {
        "pid": proc.pid,
        "linuxUser": proc.linux_user or UNKNOWN,
        "name": proc.name or UNKNOWN,
        "type": proc.type,
        "memoryUsedMb": _non_negative(proc.memory_used_mb),
    }


def _non_negative(value: int | None) -> int | None:
    return None if value is None else max(0, value)
