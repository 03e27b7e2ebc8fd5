"""Taking job records: store them, and credit what they change (board.jobs.recredit).

The hosts the records touch (those they name, and those their runs held devices on) are
locked first, in key order as ingest locks them, so the runs' GPUs read before the
store are those the stored figures were credited with.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.errors import Unprocessable
from board.jobs import recording
from board.jobs.records import JobRecord
from board.jobs.recredit import lock_job_hosts, recredit_runs
from board.jobs.store import load_cluster_since, load_run_gpus, load_run_hosts

# Runs holding a host's devices now or later: Slurm shares a card between jobs only by
# sharding or MIG, a few or tens a host; thousands are a broken or hostile sender, and
# every ingest batch of the host reads each of them (board.jobs.store), so the records
# that would pass this are refused whole (nothing of the request is stored).
MAX_RUNS_IN_FORCE_PER_HOST = 512

_CROWDED_HOSTS = """
    SELECT h.display_name, count(DISTINCT jg.job_id)
    FROM job_gpus jg
    JOIN hosts h ON h.workspace_id = jg.workspace_id AND h.id = jg.host_id
    WHERE jg.workspace_id = %s AND jg.host_id = ANY(%s)
      AND (upper_inf(jg.during) OR upper(jg.during) > now())
    GROUP BY h.id, h.display_name
    HAVING count(DISTINCT jg.job_id) > %s
    ORDER BY h.id
    LIMIT 1
"""


async def record_jobs(
    session: AsyncSession,
    workspace_id: int,
    records: Sequence[JobRecord],
    *,
    from_node: bool = False,
) -> None:
    """Store the records (a later one of a run replaces the earlier; `from_node`: sent by
    a node, which never reopens an ended run) and re-credit the intervals stored already
    that their runs' old and new ranges cover."""
    if not records:
        return
    conn = await report_connection(session)
    runs = sorted({(r.cluster, r.raw_job_id, r.restart_count) for r in records})
    named = {a.host_id for r in records for a in r.allocations}
    await lock_job_hosts(conn, workspace_id, named | await load_run_hosts(conn, workspace_id, runs))
    before = await load_run_gpus(conn, workspace_id, runs)
    known = await load_cluster_since(conn, workspace_id, named)
    since_before = {host: known.get(host) for host in named}
    await recording.store_records(session, workspace_id, records, from_node=from_node)
    cur = await conn.execute(
        _CROWDED_HOSTS, [workspace_id, sorted(named), MAX_RUNS_IN_FORCE_PER_HOST]
    )
    crowded = await cur.fetchone()
    if crowded is not None:
        raise Unprocessable(
            f"With these records {crowded[1]} runs would hold devices of host "
            f"{crowded[0]!r} now or later; a host takes at most "
            f"{MAX_RUNS_IN_FORCE_PER_HOST} (are ended runs sent as running?)"
        )
    after = await load_run_gpus(conn, workspace_id, runs)
    await recredit_runs(conn, workspace_id, before, after, since_before=since_before)
