"""A workspace's fleet health now, as the pages show it: missing GPUs, hosts in maintenance,
the windows coming up, and the hot threshold (a card is hot by its own newest reading)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.health.maintenance_windows import window_rules
from board.health.missing import FRESH, HostState, MissingGpu, absent_gpus
from board.health.windows import Occurrence, in_force, overlapping
from board.hosts.freshness import freshness

# The windows a page and the digest list: those in force now or starting this soon.
UPCOMING = timedelta(days=1)

_HOSTS = text(
    """
    SELECT h.id, h.public_id, h.latest_observed_at, h.latest_collection_status,
           w.stale_after_seconds, w.hot_temperature_c
    FROM workspaces w
    LEFT JOIN hosts h ON h.workspace_id = w.id AND h.revoked_at IS NULL
    WHERE w.id = :ws
    """
)


@dataclass(frozen=True)
class FleetHealth:
    hot_temperature_c: int
    # By the host's public id (what the pages key hosts by).
    missing: dict[str, list[MissingGpu]] = field(default_factory=dict)
    maintenance: dict[str, Occurrence] = field(default_factory=dict)
    upcoming: list[tuple[str, Occurrence]] = field(default_factory=list)

    @property
    def missing_count(self) -> int:
        return sum(len(found) for found in self.missing.values())

    def fingerprint(self) -> list[object]:
        """What the pages draw of it, as plain values (the refresh's ETag)."""
        return [
            self.hot_temperature_c,
            sorted(
                (host, m.uuid, m.index, m.since.isoformat())
                for host, found in self.missing.items()
                for m in found
            ),
            sorted(
                (h, o.start.isoformat(), o.end.isoformat()) for h, o in self.maintenance.items()
            ),
            [(h, o.rule.public_id, o.start.isoformat()) for h, o in self.upcoming],
        ]


def host_state(
    host_id: int,
    latest_observed_at: datetime | None,
    status: str | None,
    now: datetime,
    stale_after_seconds: int,
) -> HostState:
    fresh = freshness(latest_observed_at, status, now, stale_after_seconds) in FRESH
    return HostState(host_id, latest_observed_at, fresh)


async def fleet_health(session: AsyncSession, workspace_id: int, now: datetime) -> FleetHealth:
    """The workspace's health now (its unrevoked hosts)."""
    rows = (await session.execute(_HOSTS, {"ws": workspace_id})).all()
    threshold = int(rows[0][5]) if rows else 85
    public: dict[int, str] = {}
    states: list[HostState] = []
    for host_id, public_id, observed_at, status, stale_after, _ in rows:
        if host_id is None:
            continue  # a workspace without hosts: its one row, for the threshold
        public[host_id] = str(public_id)
        states.append(host_state(host_id, observed_at, status, now, int(stale_after)))
    conn = await report_connection(session)
    missing: dict[str, list[MissingGpu]] = defaultdict(list)
    for gone in await absent_gpus(conn, workspace_id, states):
        if gone.missing(now):
            missing[public[gone.host_id]].append(gone)
    rules = [r for r in await window_rules(session, workspace_id) if r.host_id in public]
    return FleetHealth(
        hot_temperature_c=threshold,
        missing=dict(missing),
        maintenance={public[h]: o for h, o in in_force(rules, now).items()},
        upcoming=[(public[o.host_id], o) for o in overlapping(rules, now, now + UPCOMING)],
    )
