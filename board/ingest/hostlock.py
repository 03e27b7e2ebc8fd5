"""A batch's first step: lock its hosts and read what the write needs of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from board.db.pgtext import int_array
from board.hosts.locks import lock_hosts
from board.ingest.access import HostKey
from board.rollups.gaps import SCHEDULE_COLUMNS, GapSchedule


@dataclass(slots=True)
class LockedHost:
    """A host row locked for the batch, with its workspace's limits."""

    workspace_id: int
    host_id: int
    # Re-checked under the lock: a cached token never lets a revoked host in.
    revoked: bool
    latest_observed_at: datetime | None
    # The newest observation's tick (normalize.encode_tick), so the in-order case needs
    # no read of raw samples to credit the interval it closes.
    latest_tick: str | None
    gaps: GapSchedule  # the workspace's maxSampleGap, dated (board.rollups.gaps)
    max_gpus: int  # the workspace's maxGpusPerHost


# Read by a statement that starts once the hosts are locked (board.reservations.store
# locks them first in the same round trip), so a sample-gap change committed while the
# batch waited is seen.
_COLUMNS = (
    "h.workspace_id, h.id, h.revoked_at IS NOT NULL, h.latest_observed_at, h.latest_tick, "
    f"{SCHEDULE_COLUMNS}, w.max_gpus_per_host"
)
_IN_KEYS = "(h.workspace_id, h.id) IN (SELECT * FROM unnest(%s::bigint[], %s::bigint[]))"


async def lock_batch_hosts(
    conn: psycopg.AsyncConnection[Any], keys: Sequence[HostKey]
) -> dict[int, LockedHost]:
    """The batch's hosts by id, locked in key order; a deleted host is simply absent."""
    rows = await lock_hosts(
        conn,
        _COLUMNS,
        _IN_KEYS,
        [int_array(ws for ws, _ in keys), int_array(host for _, host in keys)],
    )
    return {
        host_id: LockedHost(
            workspace_id=ws,
            host_id=host_id,
            revoked=revoked,
            latest_observed_at=latest_at,
            latest_tick=latest_tick,
            gaps=_schedule(gap_from, gap_seconds),
            max_gpus=int(max_gpus),
        )
        for ws, host_id, revoked, latest_at, latest_tick, gap_from, gap_seconds, max_gpus in rows
    }


_schedules: dict[tuple[tuple[datetime | None, ...], tuple[int, ...]], GapSchedule] = {}


def _schedule(froms: list[datetime | None], seconds: list[int]) -> GapSchedule:
    """One schedule object per distinct history (every batch reads it for every host)."""
    key = (tuple(froms), tuple(seconds))
    found = _schedules.get(key)
    if found is None:
        if len(_schedules) > 1024:  # bounded: histories change rarely
            _schedules.clear()
        found = _schedules[key] = GapSchedule.from_columns(froms, seconds)
    return found
