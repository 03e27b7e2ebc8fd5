"""Fleet health on the fleet page: GPUs by health, what needs attention, maintenance.

The counts are the gauge's (board.health.metric) for one workspace, from what the page
already read: a card on a fresh host is hot at or above the workspace's hotTemperatureC
by its newest reading, else ok; missing GPUs and windows come from board.health.status.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from board.fleet.schemas import HostNow
from board.health.hot import is_hot
from board.health.missing import MissingGpu
from board.health.status import FleetHealth, fleet_health
from board.health.windows import Occurrence
from board.zones import iana_zone

FRESH = ("ok", "partial")


@dataclass(frozen=True)
class HotGpu:
    host_id: str
    host_name: str
    index: int
    temperature_c: int


@dataclass(frozen=True)
class MissingShown:
    host_id: str
    host_name: str
    gpu: MissingGpu


@dataclass(frozen=True)
class WindowShown:
    host_id: str
    host_name: str
    start: str
    end: str
    note: str
    recurrence: str
    now: bool


@dataclass(frozen=True)
class HealthView:
    health: FleetHealth
    counts: dict[str, int]
    missing: list[MissingShown]
    hot: list[HotGpu]
    windows: list[WindowShown]
    zone: str

    @property
    def hot_c(self) -> int:
        return self.health.hot_temperature_c

    def missing_on(self, host_id: str) -> list[MissingGpu]:
        return self.health.missing.get(host_id, [])

    def window_on(self, host_id: str) -> WindowShown | None:
        return next((w for w in self.windows if w.host_id == host_id and w.now), None)

    @property
    def attention(self) -> bool:
        return bool(self.missing or self.hot or self.windows)

    def fingerprint(self) -> list[Any]:
        return [self.health.fingerprint(), self.counts, [(h.host_id, h.index) for h in self.hot]]


def _local(moment: datetime, zone: str) -> str:
    return moment.astimezone(iana_zone(zone)).strftime("%Y-%m-%d %H:%M")


def _window(host_id: str, name: str, o: Occurrence, zone: str, now: datetime) -> WindowShown:
    return WindowShown(
        host_id=host_id,
        host_name=name,
        start=_local(o.start, zone),
        end=_local(o.end, zone),
        note=o.rule.note,
        recurrence=o.rule.recurrence,
        now=o.start <= now < o.end,
    )


async def health_view(
    session: AsyncSession, workspace_id: int, zone: str, hosts: list[HostNow], now: datetime
) -> HealthView:
    health = await fleet_health(session, workspace_id, now)
    names = {h.host.host_id: h.host.display_name for h in hosts}
    counts = {"ok": 0, "hot": 0, "missing": health.missing_count}
    hot: list[HotGpu] = []
    for h in hosts:
        if h.host.freshness not in FRESH:
            continue
        for g in h.gpus:
            temperature = g.gpu.temperature_c
            if temperature is not None and is_hot(temperature, health.hot_temperature_c):
                counts["hot"] += 1
                hot.append(HotGpu(h.host.host_id, h.host.display_name, g.gpu.index, temperature))
            else:
                counts["ok"] += 1
    missing = [
        MissingShown(host, names.get(host, host), gone)
        for host, found in health.missing.items()
        for gone in found
    ]
    windows = [_window(host, names.get(host, host), o, zone, now) for host, o in health.upcoming]
    return HealthView(
        health=health,
        counts=counts,
        missing=sorted(missing, key=lambda m: (m.host_name.casefold(), m.gpu.index)),
        hot=sorted(hot, key=lambda g: (g.host_name.casefold(), g.index)),
        windows=windows,
        zone=zone,
    )
