"""A validated snapshot turned into what the board stores and counts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from board.ingest.schemas import SnapshotIn
from board.rollups.crediting import (
    GpuTick,
    Tick,
    compute_holders,
    derive_state,
    named_jobs,
    to_us,
)


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


def gpu_state(gpu: Any, partial: bool = False) -> str:
    """usageState as sent, else the single-tick derivation (accounting.md).

    `partial`: the observation's collectionStatus is `partial`. A GPU listing no process
    at all there may have an unreadable list, so utilization alone decides its state.
    A GPU with only graphics processes did list its processes: derived normally.
    """
    if gpu.usageState is not None:
        return str(gpu.usageState)
    has_compute = any((p.type or "compute") == "compute" for p in gpu.processes)
    return derive_state(gpu.utilPct, has_compute, partial and not gpu.processes)


def tick_of(obs: Observation, gpu_ids: dict[str, int]) -> Tick:
    partial = obs.snapshot.collectionStatus == "partial"
    # Only our agent names jobs: the released agent's ticks skip the pairs altogether.
    named = any(p.jobId is not None for g in obs.snapshot.gpus for p in g.processes)
    return Tick(
        host_id=obs.host_id,
        observed_us=obs.observed_us,
        gpus=tuple(
            GpuTick(
                gpu_id=gpu_ids[g.uuid],
                state=gpu_state(g, partial),
                util_pct=g.utilPct,
                memory_used_mb=g.memoryUsedMb,
                memory_total_mb=g.memoryTotalMb,
                holders=compute_holders((p.linuxUser, p.type) for p in g.processes),
                power_w=g.powerW,
                job_pairs=named_jobs((p.linuxUser, p.type, p.jobId) for p in g.processes)
                if named
                else (),
            )
            for g in obs.snapshot.gpus
        ),
    )


def encode_tick(tick: Tick, since: Mapping[int, int] | None = None) -> str:
    """A host's newest tick as kept on its row: what the next observation's interval needs,
    each GPU's stateSince in µs (board.ingest.state_since; null when unknown) as a 7th
    element and its power (null when unread) as an 8th. Ticks kept before energy have 6
    or 7 elements: no power, so their interval adds no energy. A GPU whose processes
    name their jobs has the (user, job) pairs as a 9th (board.rollups.crediting.named_jobs)."""
    starts = since or {}
    return json.dumps(
        [
            [
                g.gpu_id,
                g.state,
                g.util_pct,
                g.memory_used_mb,
                g.memory_total_mb,
                g.holders,
                starts.get(g.gpu_id),
                g.power_w,
                *((g.job_pairs,) if g.job_pairs else ()),
            ]
            for g in tick.gpus
        ],
        separators=(",", ":"),
    )


# A batch decodes a host's kept tick twice (the interval it opens, the state-since run);
# the ticks are immutable, so the second is the first. A batch holds at most 256
# observations: 512 entries keep a batch's ticks (4,096 cost the two workers 20 MiB).
@lru_cache(maxsize=512)
def decode_tick(host_id: int, observed_us: int, encoded: str) -> Tick:
    return Tick(
        host_id=host_id,
        observed_us=observed_us,
        gpus=tuple(
            GpuTick(
                gpu_id,
                state,
                util,
                used,
                total,
                tuple(holders),
                rest[1] if rest[1:] else None,
                tuple((user, job) for user, job in rest[2]) if rest[2:] else (),
            )
            for gpu_id, state, util, used, total, holders, *rest in json.loads(encoded)
        ),
    )


def decode_since(encoded: str) -> dict[int, int] | None:
    """Each GPU's stateSince (µs) kept in a tick; None when a GPU has none (an older tick)."""
    gpus = json.loads(encoded)
    if any(len(g) < 7 or g[6] is None for g in gpus):
        return None
    return {int(g[0]): int(g[6]) for g in gpus}
