"""The `availability.snapshot.v1` payload, key for key as the released agent builds it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent.model import UNKNOWN, Collection, GpuReading, ProcessReading

SCHEMA_VERSION = "availability.snapshot.v1"

# The board's length limits (docs/agent-api.md); a longer string gets the snapshot refused.
_HOST_CHARS = 255
_VERSION_CHARS = 64
_HOST_ID_CHARS = 128
_UUID_CHARS = 128
_NAME_CHARS = 255
_USER_CHARS = 64
_JOB_ID_CHARS = 64
_CLUSTER_CHARS = 64
_MAX_DEVICE = 1023


@dataclass(frozen=True, slots=True)
class HostIdentity:
    """The `host` object of a payload (apart from the driver version, which comes from NVML)."""

    hostname: str
    agent_version: str
    host_id: str | None = None
    display_name: str | None = None
    # The Slurm cluster this host belongs to (the config's `cluster`), sent with each
    # process's job id; None where the config names none.
    cluster: str | None = None


def build_observation(
    collection: Collection, host: HostIdentity, observed_at: datetime
) -> dict[str, Any]:
    """Build the payload dict for one tick; `observed_at` must be timezone-aware."""
    if observed_at.tzinfo is None:
        raise ValueError("observed_at must be timezone-aware")
    host_obj: dict[str, Any] = {
        "hostname": _text(host.hostname, _HOST_CHARS),
        "agentVersion": _text(host.agent_version, _VERSION_CHARS),
        "driverVersion": _text(collection.driver_version, _VERSION_CHARS),
    }
    if host.host_id is not None:
        host_obj["hostId"] = _text(host.host_id, _HOST_ID_CHARS)
    if host.display_name is not None:
        host_obj["displayName"] = _text(host.display_name, _HOST_CHARS)
    return {
        "schemaVersion": SCHEMA_VERSION,
        "collectionStatus": collection.status,
        "observedAt": observed_at.astimezone(UTC).isoformat(),
        "host": host_obj,
        "gpus": [_gpu(g, host.cluster) for g in collection.gpus],
        "errors": list(collection.errors),
    }


def encode_observation(payload: dict[str, Any]) -> bytes:
    """Serialise a payload the way the released agent does (`json.dumps` defaults, UTF-8)."""
    return json.dumps(payload).encode("utf-8")


def _gpu(gpu: GpuReading, cluster: str | None) -> dict[str, Any]:
    # Clamped so one odd reading cannot get the whole snapshot rejected (422).
    total = max(1, gpu.memory_total_mb)
    out: dict[str, Any] = {
        "index": max(0, gpu.index),
        "uuid": _text(gpu.uuid, _UUID_CHARS),
        "name": _text(gpu.name, _NAME_CHARS),
        "memoryTotalMb": total,
        "utilPct": min(100, max(0, gpu.util_pct)),
        "memoryUsedMb": min(total, max(0, gpu.memory_used_mb)),
        "temperatureC": _non_negative(gpu.temperature_c),
        "powerW": _non_negative(gpu.power_w),
        "processes": [_process(p, cluster) for p in gpu.processes if p.pid > 0],
    }
    if gpu.usage_state is not None:
        out["usageState"] = gpu.usage_state
    # Our agent only (the released one never sends it): absent when NVML could not say.
    if gpu.minor_number is not None and 0 <= gpu.minor_number <= _MAX_DEVICE:
        out["minorNumber"] = gpu.minor_number
    return out


def _process(proc: ProcessReading, cluster: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "pid": proc.pid,
        "linuxUser": _text(proc.linux_user, _USER_CHARS),
        "name": _text(proc.name, _NAME_CHARS),
        "type": proc.type,
        "memoryUsedMb": _non_negative(proc.memory_used_mb),
    }
    # Our agent only: the scheduler job from the process's cgroup, and the cluster the
    # config names. Absent, not null, when unknown: the released agent's shape.
    if proc.job_id:
        out["jobId"] = proc.job_id[:_JOB_ID_CHARS]
        if cluster:
            out["cluster"] = _text(cluster, _CLUSTER_CHARS)
    return out


def _non_negative(value: int | None) -> int | None:
    return None if value is None else max(0, value)


def _text(value: str, max_chars: int) -> str:
    """`value` as the board accepts it: valid UTF-8, printable, not empty, not too long.

    Names come from the system (passwd, /proc, NVML, the hostname), which decodes
    undecodable bytes to lone surrogates; one of those, a NUL or a name over the limit
    would get the whole snapshot refused, so each is cleaned here instead.
    """
    valid = value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    printable = "".join(ch for ch in valid if ch.isprintable()).strip()
    return printable[:max_chars] or UNKNOWN
