"""Deterministic fake telemetry for machines without a GPU (demos, tests, the board's demo data).

Stable API::

    from agent.fake import FakeCollector
    fake = FakeCollector("demo-host-1")
    payload = fake.observation(datetime.now(UTC), host_id="h1", display_name="Demo 1")

Four NVIDIA RTX A6000 cards, the same story at every tick:

- `GPU-0` active: `alice` runs `python` (compute), utilization 70–98 %.
- `GPU-1` idle-held: `bob` keeps a `jupyter` kernel (compute) on it, utilization 0–3 %.
- `GPU-2` idle: only the display server (`Xorg`, user `gdm`, graphics).
- `GPU-3` active and shared: `carol` and `dave` each run `python` (compute), 40–90 %.

Values depend only on the host name and the observation time (to the second), so a
test or a demo backfill gets the same numbers every time it asks.

`FakeCollector(name, minor_numbers=True)` also reports each card's minor number (equal
to its index, as on a host whose `/dev/nvidiaN` follow the PCI order), a field only our
own agent sends: off by default, so payloads keep the released agent's shape.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from agent import AGENT_VERSION
from agent.model import Collection, GpuReading, ProcessReading, ProcessType, UtilReading
from agent.payload import HostIdentity, build_observation
from agent.usage import single_tick_state

FAKE_DRIVER_VERSION = "560.35.05-fake"
FAKE_GPU_NAME = "NVIDIA RTX A6000"
FAKE_MEMORY_TOTAL_MB = 49140


@dataclass(frozen=True, slots=True)
class _FakeProc:
    offset: int
    user: str
    name: str
    type: ProcessType
    memory_mb: int


@dataclass(frozen=True, slots=True)
class _FakeGpu:
    util: tuple[int, int]
    memory_used_mb: tuple[int, int]
    temperature_c: tuple[int, int]
    power_w: tuple[int, int]
    procs: tuple[_FakeProc, ...]


_SCENARIO: tuple[_FakeGpu, ...] = (
    _FakeGpu(
        (70, 98),
        (30000, 45000),
        (70, 82),
        (220, 290),
        (_FakeProc(0, "alice", "python", "compute", 0),),
    ),
    _FakeGpu(
        (0, 3), (8200, 8200), (40, 44), (70, 76), (_FakeProc(1, "bob", "jupyter", "compute", 8000),)
    ),
    _FakeGpu(
        (0, 0), (128, 128), (38, 41), (68, 71), (_FakeProc(2, "gdm", "Xorg", "graphics", 128),)
    ),
    _FakeGpu(
        (40, 90),
        (20000, 40000),
        (60, 75),
        (180, 260),
        (
            _FakeProc(3, "carol", "python", "compute", 0),
            _FakeProc(4, "dave", "python", "compute", 0),
        ),
    ),
)


class FakeCollector:
    """A collector with four fake GPUs; same interface as `NvmlCollector`."""

    gpu_count = len(_SCENARIO)
    driver_version = FAKE_DRIVER_VERSION

    def __init__(self, hostname: str, *, minor_numbers: bool = False) -> None:
        self.hostname = hostname
        self.minor_numbers = minor_numbers
        self._pid_base = 1000 + _digest(hostname, "pid") % 60000

    def collect(self, observed_at: datetime | None = None) -> Collection:
        """The fake GPUs at `observed_at` (now when omitted), with single-tick usage states."""
        at = observed_at or datetime.now(UTC)
        tick = int(at.timestamp())
        gpus = tuple(self._gpu(i, spec, tick) for i, spec in enumerate(_SCENARIO))
        return Collection(driver_version=FAKE_DRIVER_VERSION, gpus=gpus)

    def observation(
        self,
        observed_at: datetime,
        *,
        agent_version: str = AGENT_VERSION,
        host_id: str | None = None,
        display_name: str | None = None,
    ) -> dict[str, object]:
        """A complete `availability.snapshot.v1` payload for this fake host at `observed_at`."""
        host = HostIdentity(self.hostname, agent_version, host_id, display_name)
        return build_observation(self.collect(observed_at), host, observed_at)

    def utilization(self) -> list[UtilReading]:
        """The fake GPUs' utilization and memory now, for the live stream."""
        return [UtilReading(g.uuid, g.util_pct, g.memory_used_mb) for g in self.collect().gpus]

    def close(self) -> None:
        """Nothing to release; present for interface parity."""

    def _gpu(self, index: int, spec: _FakeGpu, tick: int) -> GpuReading:
        def pick(field: str, bounds: tuple[int, int]) -> int:
            low, high = bounds
            return low + _digest(self.hostname, f"{index}:{field}:{tick}") % (high - low + 1)

        used = pick("mem", spec.memory_used_mb)
        compute = sum(1 for p in spec.procs if p.type == "compute")
        procs = tuple(
            ProcessReading(
                pid=self._pid_base + p.offset,
                linux_user=p.user,
                name=p.name,
                type=p.type,
                # Share the card's used memory among processes that did not set theirs.
                memory_used_mb=p.memory_mb or used // max(1, compute),
            )
            for p in spec.procs
        )
        reading = GpuReading(
            index=index,
            uuid=f"GPU-{index}",
            name=FAKE_GPU_NAME,
            memory_total_mb=FAKE_MEMORY_TOTAL_MB,
            memory_used_mb=used,
            util_pct=pick("util", spec.util),
            temperature_c=pick("temp", spec.temperature_c),
            power_w=pick("power", spec.power_w),
            processes=procs,
            minor_number=index if self.minor_numbers else None,
        )
        return replace(reading, usage_state=single_tick_state(reading))


def _digest(*parts: str) -> int:
    # hashlib, not hash(): str hashes are salted per process.
    return int.from_bytes(hashlib.sha256("|".join(parts).encode()).digest()[:8], "big")
