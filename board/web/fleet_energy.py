"""The fleet's energy totals (docs/ui.md, "Fleet"): the watts its GPUs draw now, the
kWh of the workspace's local day so far and the idle-held share of them.

Watts come from the newest observation of each GPU on a fresh host (as the cards); kWh
from the usage report grouped by day (the GPUs' own energy in every state), so the page
says what the reports say. The fleet page asks every few seconds, so the cost matters:
the day's report read 6-10 ms at the demo's size (6 hosts, 8 hours of history), under
the 20 ms that would call for keeping it per workspace, so it is read on every request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from board.fleet.schemas import HostNow
from board.reportkit.params import day_now, parse_window, parse_zone
from board.reports import service as reports
from board.web.fleet import FRESH


@dataclass(frozen=True)
class DayEnergy:
    """The local day so far, from the usage report's row for it (zeros before any)."""

    day: str
    energy_kwh: float = 0.0
    idle_held_energy_kwh: float = 0.0
    covered_hours: float = 0.0
    energy_covered_hours: float = 0.0

    @property
    def idle_held_share(self) -> float | None:
        return self.idle_held_energy_kwh / self.energy_kwh if self.energy_kwh > 0 else None

    @property
    def partial(self) -> bool:
        """Some observed time had no power reading: the kWh rest on part of it."""
        return self.energy_covered_hours < self.covered_hours


@dataclass(frozen=True)
class FleetEnergy:
    watts_now: int
    # GPUs on fresh hosts whose newest observation has no power reading.
    unreported: int
    today: DayEnergy

    def fingerprint(self) -> list[Any]:
        t = self.today
        return [
            self.watts_now,
            self.unreported,
            t.day,
            t.energy_kwh,
            t.idle_held_energy_kwh,
            t.covered_hours,
            t.energy_covered_hours,
        ]


def watts_now(hosts: list[HostNow]) -> tuple[int, int]:
    """Σ of the newest power readings of GPUs on fresh hosts, and how many have none."""
    total = missing = 0
    for host in hosts:
        if host.host.freshness not in FRESH:
            continue
        for gpu in host.gpus:
            if gpu.gpu.power_w is None:
                missing += 1
            else:
                total += gpu.gpu.power_w
    return total, missing


def day_energy(day: str, rows: list[dict[str, Any]]) -> DayEnergy:
    for row in rows:
        if row.get("day") == day:
            return DayEnergy(
                day,
                float(row["energyKWh"]),
                float(row["idleHeldEnergyKWh"]),
                float(row["coveredGpuHours"] or 0.0),
                float(row["energyCoveredHours"]),
            )
    return DayEnergy(day)


async def today_energy(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, tz: str, now: datetime
) -> DayEnergy:
    """The workspace's local day so far, from the usage report."""
    _, zone = parse_zone(tz)
    today = day_now(zone, now)
    window = parse_window(today.isoformat(), (today + timedelta(days=1)).isoformat(), tz)
    report = await reports.usage_report(conn, workspace_id, window, ("day",))
    return day_energy(today.isoformat(), report.rows)


async def fleet_energy(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    tz: str,
    hosts: list[HostNow],
    now: datetime,
) -> FleetEnergy:
    watts, missing = watts_now(hosts)
    return FleetEnergy(watts, missing, await today_energy(conn, workspace_id, tz, now))
