"""The fleet-health part of a detection pass: `gpu.missing`, `gpu.hot`, maintenance windows.

board.notices.detect.observe calls `observe_health` and adds what it found to the pass,
so these conditions get the episodes, hysteresis, snoozes and outbox of every other:

- `gpu.missing`: a GPU absent from its fresh host's newest observation, not retired,
  since its first observation without it (board.health.missing); due after 2 minutes.
  A stale host's GPUs are neither missing nor not (the pass's `host-gpus:` rule): its
  open gpu.missing episodes wait, and none opens, until it reports again.
- `gpu.hot`: at or above the workspace's hotTemperatureC, since the first reading of the
  unbroken hot run (board.health.hot); due after 5 minutes. Besides the pass's time
  hysteresis, an open episode holds down to HOT_BAND_C below the threshold, so a card
  hovering around it stays in one episode.
- A host inside a maintenance window raises nothing: its conditions are dropped and its
  open episodes neither end nor are told until the window is over (`maintenance:<host>`).
- A host in error reports no GPU either: its gpu.missing and gpu.hot episodes wait too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.health.hot import HOT_FOR, hot_since, is_hot, newest_temperatures
from board.health.maintenance_windows import window_rules
from board.health.missing import MISSING_AFTER, absent_gpus
from board.health.status import UPCOMING, host_state
from board.health.windows import in_force, overlapping

# An open gpu.hot episode holds while the card stays within this many degrees below.
HOT_BAND_C = 3

# The detector's host rows: id, public id, display name, hostname, newest observedAt,
# its collection status, its tick (board.notices.detect.observe reads them).
HostRow = Sequence[Any]


class WorkspaceLike(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def slug(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def stale_after_seconds(self) -> int: ...


class Found(NamedTuple):
    """A condition holding now, in the order of board.notices.detect.Condition's fields."""

    kind: str
    subject: str
    host_id: int
    gpu_id: int | None
    since: datetime
    threshold: timedelta
    data: dict[str, Any]
    people: list[str]


@dataclass
class HealthSeen:
    conditions: list[Found] = field(default_factory=list)
    # Hosts inside a maintenance window now.
    in_maintenance: set[int] = field(default_factory=set)
    # Windows in force now or starting within a day, for the digest.
    maintenance: list[dict[str, Any]] = field(default_factory=list)
    # Open episodes that neither end nor are told this pass: "maintenance:<host id>" for
    # a host in a window, "<kind>:<host id>" for a host that cannot tell (not fresh).
    waiting: set[str] = field(default_factory=set)


_SETTINGS = text("SELECT hot_temperature_c, max_sample_gap_seconds FROM workspaces WHERE id = :ws")
_OPEN_HOT = text(
    "SELECT gpu_id FROM notice_episodes WHERE workspace_id = :ws AND kind = 'gpu.hot' "
    "AND closed_at IS NULL"
)


async def observe_health(
    session: AsyncSession,
    ws: WorkspaceLike,
    now: datetime,
    hosts: Sequence[HostRow],
    link: Callable[[str, object], str | None],
) -> HealthSeen:
    """What fleet health holds at `now` in one workspace (read only).

    `link(host public id, GPU index)`: the GPU's URL on the board, or None."""
    seen = HealthSeen()
    threshold, max_gap = (await session.execute(_SETTINGS, {"ws": ws.id})).one()
    workspace = {"slug": ws.slug, "name": ws.name}
    shown: dict[int, dict[str, Any]] = {}
    states = []
    for host_id, public, display, hostname, observed_at, status, _tick in hosts:
        shown[host_id] = {"hostId": str(public), "displayName": display, "hostname": hostname}
        states.append(host_state(host_id, observed_at, status, now, ws.stale_after_seconds))
    # A host stale or in error reports no GPU: whether one is missing or hot is unknown.
    seen.waiting = {
        f"{kind}:{s.host_id}" for s in states if not s.fresh for kind in ("gpu.missing", "gpu.hot")
    }
    rules = await window_rules(session, ws.id)
    seen.in_maintenance = set(in_force(rules, now))
    seen.waiting.update(f"maintenance:{host_id}" for host_id in seen.in_maintenance)
    seen.maintenance = [
        {
            "host": shown[o.host_id],
            "start": o.start.isoformat(),
            "end": o.end.isoformat(),
            "recurrence": o.rule.recurrence,
            "note": o.rule.note,
        }
        for o in overlapping(rules, now, now + UPCOMING)
        if o.host_id in shown
    ]

    def data(host_id: int, gpu: dict[str, Any], since: datetime, **more: Any) -> dict[str, Any]:
        return {
            "workspace": workspace,
            "host": shown[host_id],
            "gpu": gpu,
            "linuxUsers": [],
            "memberEmails": [],
            "since": since.isoformat(),
            "url": link(shown[host_id]["hostId"], gpu["index"]),
            **more,
        }

    conn = await report_connection(session)
    for gone in await absent_gpus(conn, ws.id, states):
        gpu = {"uuid": gone.uuid, "index": gone.index, "name": gone.name}
        last = gone.last_seen_at.isoformat() if gone.last_seen_at else None
        seen.conditions.append(
            Found(
                "gpu.missing",
                f"gpu:{gone.gpu_id}",
                gone.host_id,
                gone.gpu_id,
                gone.since,
                MISSING_AFTER,
                data(gone.host_id, gpu, gone.since, lastSeenAt=last),
                [],
            )
        )
    await _hot(session, ws.id, now, states, int(threshold), int(max_gap), seen, data)
    return seen


async def _hot(
    session: AsyncSession,
    workspace_id: int,
    now: datetime,
    states: list[Any],
    threshold: int,
    max_gap_seconds: int,
    seen: HealthSeen,
    data: Callable[..., dict[str, Any]],
) -> None:
    fresh = {s.host_id: s for s in states if s.fresh}
    if not fresh:
        return
    conn = await report_connection(session)
    readings = await newest_temperatures(conn, workspace_id, fresh)
    held = set((await session.execute(_OPEN_HOT, {"ws": workspace_id})).scalars().all())
    hot: dict[int, dict[int, int]] = defaultdict(dict)
    for host_id, temperatures in readings.items():
        for gpu_id, temperature in temperatures.items():
            floor = threshold - HOT_BAND_C if gpu_id in held else threshold
            if temperature is not None and is_hot(temperature, floor):
                hot[host_id][gpu_id] = temperature
    if not hot:
        return
    devices = {
        gpu_id: {"uuid": uuid, "index": index, "name": name}
        for gpu_id, uuid, index, name in (
            await session.execute(
                text(
                    "SELECT id, uuid, gpu_index, name FROM gpus "
                    "WHERE workspace_id = :ws AND id = ANY(:ids)"
                ),
                {"ws": workspace_id, "ids": [g for found in hot.values() for g in found]},
            )
        ).all()
    }
    for host_id, found in hot.items():
        starting = [g for g in found if g not in held]
        latest = fresh[host_id].latest_observed_at
        since = (
            await hot_since(
                conn,
                workspace_id,
                host_id,
                starting,
                threshold,
                latest,
                timedelta(seconds=max_gap_seconds),
            )
            if starting and latest is not None
            else {}
        )
        for gpu_id, temperature in found.items():
            started = since.get(gpu_id, now)  # an open episode's own start is kept
            gpu = devices.get(gpu_id, {"uuid": str(gpu_id), "index": None, "name": None})
            seen.conditions.append(
                Found(
                    "gpu.hot",
                    f"gpu:{gpu_id}",
                    host_id,
                    gpu_id,
                    started,
                    HOT_FOR,
                    data(
                        host_id,
                        gpu,
                        started,
                        temperatureC=temperature,
                        hotTemperatureC=threshold,
                    ),
                    [],
                )
            )
