"""GPU ids for a batch: from a per-process cache, new GPUs upserted in one statement.

A host may have at most its workspace's maxGpusPerHost distinct GPUs; a push that
would pass that is refused whole (422, reason `too_many_gpus`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from board.db.pgtext import int_array
from board.errors import Unprocessable
from board.ingest.hostlock import LockedHost
from board.ingest.normalize import Observation

# Not a NamedTuple: built for every GPU of every push, and a plain tuple is cheaper.
GpuKey = tuple[int, str]  # (host_id, uuid)


class GpuInfo(NamedTuple):
    """A GPU row as cached: its id and the details a push may change."""

    gpu_id: int
    gpu_index: int
    name: str
    memory_total_mb: int
    # None until an agent reports one (the released agent never does).
    minor_number: int | None


class _GpuRow(NamedTuple):
    workspace_id: int
    gpu_index: int
    name: str
    memory_total_mb: int
    minor_number: int | None
    observed_at: datetime  # when a renamed GPU's old name ends (gpu_name_history)


class TooManyGpus(Unprocessable):
    """A push would give its host more distinct GPUs than the workspace allows."""

    def __init__(self, limit: int, known: int, new: int) -> None:
        super().__init__(
            f"This push would add {new} new GPU(s) to the {known} this host already has, "
            f"above the workspace's limit of {limit} GPUs per host (setting maxGpusPerHost); "
            "nothing was stored.",
            reason="too_many_gpus",
        )
        self.limit = limit


# A GPU whose name changes keeps its old name, for the hours before the change, in
# gpu_name_history (hours are priced by the model they were reported as). The CTE reads
# the rows as they were before this statement's upsert: the old names. The first name
# holds from 2000-01-01, before any hour the board keeps (archives start there).
_UPSERT = """
    WITH incoming AS (
        SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::int[], %s::text[],
                             %s::int[], %s::int[], %s::timestamptz[])
            AS i(workspace_id, host_id, uuid, gpu_index, name, memory_total_mb, minor_number,
                 observed_at)
    ), renamed AS (
        INSERT INTO gpu_name_history (workspace_id, gpu_id, name, since, until)
        SELECT g.workspace_id, g.id, g.name,
               coalesce((SELECT max(h.until) FROM gpu_name_history h
                         WHERE h.workspace_id = g.workspace_id AND h.gpu_id = g.id),
                        '2000-01-01T00:00:00Z'),
               i.observed_at
        FROM incoming i
        JOIN gpus g ON g.workspace_id = i.workspace_id AND g.host_id = i.host_id
                   AND g.uuid = i.uuid
        WHERE g.name <> i.name
        ON CONFLICT DO NOTHING
    )
    INSERT INTO gpus (workspace_id, host_id, uuid, gpu_index, name, memory_total_mb,
                      minor_number)
    SELECT workspace_id, host_id, uuid, gpu_index, name, memory_total_mb, minor_number
    FROM incoming
    ON CONFLICT (workspace_id, host_id, uuid) DO UPDATE
        SET gpu_index = EXCLUDED.gpu_index, name = EXCLUDED.name,
            memory_total_mb = EXCLUDED.memory_total_mb,
            minor_number = coalesce(EXCLUDED.minor_number, gpus.minor_number)
    RETURNING host_id, uuid, id, gpu_index, name, memory_total_mb, minor_number
"""

# The GPUs a late point names: added when new, read as they are when known (a late
# point changes no GPU). Every row comes back: the inserted ones and the existing ones.
_ADD = """
    WITH incoming AS (
        SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::int[], %s::text[],
                             %s::int[], %s::int[], %s::timestamptz[])
            AS i(workspace_id, host_id, uuid, gpu_index, name, memory_total_mb, minor_number,
                 observed_at)
    ), added AS (
        INSERT INTO gpus (workspace_id, host_id, uuid, gpu_index, name, memory_total_mb,
                          minor_number)
        SELECT workspace_id, host_id, uuid, gpu_index, name, memory_total_mb, minor_number
        FROM incoming
        ON CONFLICT (workspace_id, host_id, uuid) DO NOTHING
        RETURNING host_id, uuid, id, gpu_index, name, memory_total_mb, minor_number
    )
    SELECT * FROM added
    UNION ALL
    SELECT g.host_id, g.uuid, g.id, g.gpu_index, g.name, g.memory_total_mb, g.minor_number
    FROM incoming i
    JOIN gpus g ON g.workspace_id = i.workspace_id AND g.host_id = i.host_id AND g.uuid = i.uuid
"""


async def resolve_gpu_ids(
    conn: psycopg.AsyncConnection[Any],
    candidates: Sequence[tuple[int, Observation]],
    hosts: Mapping[int, LockedHost],
    cache: dict[GpuKey, GpuInfo],
    touched: list[GpuKey],
) -> dict[int, TooManyGpus]:
    """Make sure every (host, uuid) has a GPU row; the cache spares the round trips.

    `candidates` are (index, observation), each host's in time order. A GPU the cache
    does not know may be new: the host's GPUs are read (its row is locked, so no other
    push of it can add one meanwhile) and an observation that would pass the limit is
    refused whole. Returns the refused ones by index. The keys cached here are listed
    in `touched`: if the transaction fails they must be forgotten, since the rows they
    point to were rolled back.
    """
    refused = await _refuse_past_limit(conn, candidates, hosts, cache)
    wanted: dict[GpuKey, tuple[_GpuRow, bool]] = {}  # the row, and may it change one
    for i, obs in candidates:
        if i in refused:
            continue
        newest = hosts[obs.host_id].latest_observed_at
        # A late point (a spool replayed, an archive back-filled) adds a GPU it names
        # but changes no known one: the host's newest observations say what a card is now.
        late = newest is not None and obs.observed_at < newest
        for g in obs.snapshot.gpus:
            key = (obs.host_id, g.uuid)
            known = cache.get(key)
            minor = g.minorNumber
            # Everything but the id: a GPU's index, name, memory or minor number may
            # change. No minor number (the released agent) keeps the one known.
            if known is None or (
                not late
                and known[1:]
                != (g.index, g.name, g.memoryTotalMb, known[4] if minor is None else minor)
            ):
                row = _GpuRow(
                    obs.workspace_id, g.index, g.name, g.memoryTotalMb, minor, obs.observed_at
                )
                wanted[key] = (row, not late)
    if not wanted:
        return refused
    for statement, may_change in ((_UPSERT, True), (_ADD, False)):
        items = sorted((key, row) for key, (row, change) in wanted.items() if change is may_change)
        if not items:
            continue
        cur = await conn.execute(
            statement,
            [
                [row.workspace_id for _, row in items],
                [host_id for (host_id, _), _ in items],
                [uuid for (_, uuid), _ in items],
                [row.gpu_index for _, row in items],
                [row.name for _, row in items],
                [row.memory_total_mb for _, row in items],
                [row.minor_number for _, row in items],
                [row.observed_at for _, row in items],
            ],
        )
        for host_id, uuid, gpu_id, index, name, total, minor in await cur.fetchall():
            touched.append((host_id, uuid))
            cache[(host_id, uuid)] = GpuInfo(gpu_id, index, name, total, minor)
    return refused


async def _refuse_past_limit(
    conn: psycopg.AsyncConnection[Any],
    candidates: Sequence[tuple[int, Observation]],
    hosts: Mapping[int, LockedHost],
    cache: dict[GpuKey, GpuInfo],
) -> dict[int, TooManyGpus]:
    """The observations that would give their host more GPUs than its limit, by index."""
    unknown = {
        obs.host_id
        for _, obs in candidates
        for g in obs.snapshot.gpus
        if (obs.host_id, g.uuid) not in cache
    }
    refused: dict[int, TooManyGpus] = {}
    if not unknown:
        return refused
    have = await _host_gpus(conn, hosts, unknown)
    for i, obs in candidates:
        known = have[obs.host_id]
        new = {g.uuid for g in obs.snapshot.gpus} - known
        limit = hosts[obs.host_id].max_gpus
        if new and len(known) + len(new) > limit:
            refused[i] = TooManyGpus(limit, len(known), len(new))
        else:
            known |= new
    return refused


async def _host_gpus(
    conn: psycopg.AsyncConnection[Any], hosts: Mapping[int, LockedHost], host_ids: set[int]
) -> dict[int, set[str]]:
    """The uuids of the GPUs these hosts have now."""
    keys = sorted((hosts[h].workspace_id, h) for h in host_ids)
    cur = await conn.execute(
        """
        SELECT g.host_id, g.uuid FROM gpus g
        JOIN unnest(%s::bigint[], %s::bigint[]) AS k(ws, host_id)
          ON g.workspace_id = k.ws AND g.host_id = k.host_id
        """,
        [int_array(ws for ws, _ in keys), int_array(host for _, host in keys)],
    )
    found: dict[int, set[str]] = defaultdict(set)
    for host_id, uuid in await cur.fetchall():
        found[host_id].add(uuid)
    return found
