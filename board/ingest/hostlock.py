"""A batch's first step: lock its hosts and read what the write needs of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from board.db.locks import lock_hosts
from board.db.pgtext import int_array
from board.ingest.access import HostKey


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
    max_gap_us: int  # the workspace's maxSampleGapSeconds, in microseconds
    max_gpus: int  # the workspace's maxGpusPerHost


_COLUMNS = (
    "h.workspace_id, h.id, h.revoked_at IS NOT NULL, h.latest_observed_at, h.latest_tick, "
    "w.max_sample_gap_seconds, w.max_gpus_per_host"
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
            max_gap_us=int(gap_seconds) * 1_000_000,
            max_gpus=int(max_gpus),
        )
        for ws, host_id, revoked, latest_at, latest_tick, gap_seconds, max_gpus in rows
    }
