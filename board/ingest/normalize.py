"""A validated snapshot turned into what the board stores and counts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from board.ingest.schemas import SnapshotIn
from board.rollups.crediting import GpuTick, Tick, compute_holders, derive_state, to_us


@dataclass(frozen=True, slots=True)
class Observation:
    """One accepted push, attributed by the agent token (never by payload hostId)."""

    workspace_id: int
    host_id: int
    observed_at: datetime
    received_at: datetime
    snapshot: SnapshotIn

    @property
    def observed_us(self) -> int:
        return to_us(self.observed_at)


def gpu_state(gpu: Any) -> str:
    """usageState as sent, else the single-tick derivation (accounting.md)."""
    if gpu.usageState is not None:
        return str(gpu.usageState)
    has_compute = any((p.type or "compute") == "compute" for p in gpu.processes)
    return derive_state(gpu.utilPct, has_compute)


def latest_gpus_json(obs: Observation, gpu_ids: dict[str, int]) -> list[dict[str, Any]]:
    """The newest GPU state as the hosts API serves it (plus the internal gpuId)."""
    return [
        {
            "gpuId": gpu_ids[g.uuid],
            "uuid": g.uuid,
            "index": g.index,
            "name": g.name,
            "usageState": gpu_state(g),
            "reportedUsageState": g.usageState,
            "utilPct": g.utilPct,
            "memoryUsedMb": g.memoryUsedMb,
            "memoryTotalMb": g.memoryTotalMb,
            "temperatureC": g.temperatureC,
            "powerW": g.powerW,
            "processes": [
                {
                    "pid": p.pid,
                    "linuxUser": p.linuxUser,
                    "name": p.name,
                    "type": p.type or "compute",
                    "memoryUsedMb": p.memoryUsedMb,
                }
                for p in g.processes
            ],
        }
        for g in obs.snapshot.gpus
    ]


def tick_of(obs: Observation, gpu_ids: dict[str, int]) -> Tick:
    return Tick(
        host_id=obs.host_id,
        observed_us=obs.observed_us,
        gpus=tuple(
            GpuTick(
                gpu_id=gpu_ids[g.uuid],
                state=gpu_state(g),
                util_pct=g.utilPct,
                memory_used_mb=g.memoryUsedMb,
                memory_total_mb=g.memoryTotalMb,
                holders=compute_holders((p.linuxUser, p.type) for p in g.processes),
            )
            for g in obs.snapshot.gpus
        ),
    )


def tick_from_latest_json(host_id: int, observed_us: int, gpus: list[dict[str, Any]]) -> Tick:
    """The host's newest observation as stored on the host row: the in-order fast path."""
    return Tick(
        host_id=host_id,
        observed_us=observed_us,
        gpus=tuple(
            GpuTick(
                gpu_id=int(g["gpuId"]),
                state=str(g["usageState"]),
                util_pct=int(g["utilPct"]),
                memory_used_mb=int(g["memoryUsedMb"]),
                memory_total_mb=int(g["memoryTotalMb"]),
                holders=compute_holders((p["linuxUser"], p["type"]) for p in g["processes"]),
            )
            for g in gpus
        ),
    )
