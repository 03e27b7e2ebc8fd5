"""The people view: each Linux user's GPUs held now on fresh hosts, idle-held ones and
since when, joined with this week's GPU-hours and energy (kWh, idle-held kWh) from the
usage report."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from board.fleet.schemas import HostNow
from board.rollups.crediting import billed_users
from board.web.fleet import FRESH, duration


@dataclass
class Person:
    """One Linux user: the GPUs they hold now, idle-held ones and since when, this week's hours."""

    user: str
    held: int = 0
    idle_held: int = 0
    idle_held_since: datetime | None = None
    idle_held_for: str = ""
    held_gpu_hours: float = 0.0
    idle_held_gpu_hours: float = 0.0
    # This week's energy: the user's share of the GPUs they held (docs/accounting.md).
    energy_kwh: float = 0.0
    idle_held_energy_kwh: float = 0.0
    # Power was not known for all of the held time: the kWh rest on part of it.
    energy_partial: bool = False


def running_now(hosts: list[HostNow]) -> set[str]:
    """Linux users with a compute process in the newest observation of a fresh host."""
    return {
        user
        for host in hosts
        if host.host.freshness in FRESH
        for gpu in host.gpus
        for user in gpu.holders
    }


def people(
    hosts: list[HostNow], week: list[dict[str, Any]], now: datetime, sort: str = "idle_held"
) -> list[Person]:
    """Holders on fresh hosts now, joined with the week's usage report rows (by `user`).

    Sorted by idle-held GPUs (then the longest idle-held first), or by this week's hours.
    Only for roles that may see processes: the holders are Linux users.
    """
    found: dict[str, Person] = {}
    for host in hosts:
        if host.host.freshness not in FRESH:
            continue  # its cards are "not observed": nobody holds them now
        for gpu in host.gpus:
            state = gpu.gpu.usage_state
            if state not in ("active", "idle_held"):
                continue
            for user in billed_users(state, gpu.holders):
                person = found.setdefault(user, Person(user))
                person.held += 1
                if state == "idle_held":
                    person.idle_held += 1
                    since = gpu.gpu.state_since
                    if since is not None and (
                        person.idle_held_since is None or since < person.idle_held_since
                    ):
                        person.idle_held_since = since
    for row in week:
        person = found.setdefault(str(row["user"]), Person(str(row["user"])))
        person.held_gpu_hours = float(row["heldGpuHours"] or 0.0)
        person.idle_held_gpu_hours = float(row["idleHeldGpuHours"] or 0.0)
        person.energy_kwh = float(row.get("energyKWh") or 0.0)
        person.idle_held_energy_kwh = float(row.get("idleHeldEnergyKWh") or 0.0)
        person.energy_partial = float(row.get("energyCoveredHours") or 0.0) < person.held_gpu_hours
    for person in found.values():
        person.idle_held_for = duration(person.idle_held_since, now)
    listed = list(found.values())
    if sort == "hours":
        listed.sort(key=lambda p: (-p.held_gpu_hours, p.user))
    else:
        listed.sort(
            key=lambda p: (
                -p.idle_held,
                p.idle_held_since.timestamp() if p.idle_held_since else float("inf"),
                -p.held,
                p.user,
            )
        )
    return listed
