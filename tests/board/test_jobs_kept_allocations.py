"""The writer keeps each host's job GPUs between batches (board.jobs.batch): the copy is
read again whenever the host's allocation version moved, which triggers move on every
change ingest reads (records, cluster membership, GPU numbers), and whenever a batch
reaches back past what the copy holds. Figures credited through the kept copy equal a
rebuild from raw."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from board.reservations.rebuild import rebuild_hours
from tests.board.builders import push
from tests.board.job_builders import (
    MINUTE,
    connect,
    job,
    job_figures,
    kind_gpu,
    outside_hours,
    record,
)
from tests.board.test_jobs_crediting import host, series
from tests.board.test_reports_builders import days_ago_midnight, observation, quick_tenant

HOUR = timedelta(hours=1)
SECOND = timedelta(seconds=1)


async def version(app: Any, host_id: int) -> int:
    async with await connect(app) as conn:
        cur = await conn.execute(
            "SELECT version FROM host_allocation_versions WHERE host_id = %s", [host_id]
        )
        row = await cur.fetchone()
    return 0 if row is None else int(row[0])


async def test_the_version_moves_with_what_ingest_reads_and_only_then(app, client) -> None:
    tenant = await quick_tenant(app, "kept")
    ws, host_id, token = await host(app, client, tenant, "node-1")
    start = days_ago_midnight(1) + 10 * MINUTE
    await series(client, token, start, [("unused", "unused")])
    seen = await version(app, host_id)
    assert seen > 0  # the host's GPUs were added

    # A push that changes no GPU number leaves it.
    await series(client, token, start + MINUTE, [("active", "unused")])
    assert await version(app, host_id) == seen

    await record(app, ws, job("7", start, None, {host_id: (0,)}))
    recorded = await version(app, host_id)
    assert recorded > seen  # job GPUs and the cluster host

    await record(app, ws, job("7", start, start + 5 * MINUTE, {host_id: (0,)}))
    ended = await version(app, host_id)
    assert ended > recorded

    # A minor number a device is matched by.
    body = observation(start + 2 * MINUTE, [kind_gpu(0, "unused"), kind_gpu(1, "unused")])
    body["gpus"][1]["minorNumber"] = 5
    assert (await push(client, token, body)).status_code == 202
    assert await version(app, host_id) > ended


async def test_kept_job_gpus_follow_records_gpus_and_late_points(app, client) -> None:
    tenant = await quick_tenant(app, "kept")
    ws, host_id, token = await host(app, client, tenant, "node-1")
    midnight = days_ago_midnight(1)
    start = midnight + 6 * HOUR
    # The writer keeps the host's (empty) job GPUs.
    await series(client, token, start, [("unused", "unused")] * 2)

    # A job recorded after: the next batches see it.
    await record(app, ws, job("1", start + MINUTE, None, {host_id: (0,)}))
    await series(client, token, start + 2 * MINUTE, [("unused", "idle_held")] * 2)
    figures = await job_figures(app, ws)
    covered = sum(row[0] for key, row in figures.items() if key[0] == "1")
    assert covered == 2 * 60 * 10**6  # [start+1, start+3): the job's first two minutes

    # Ended: nothing is credited past its end, however many batches follow.
    await record(app, ws, job("1", start + MINUTE, start + 3 * MINUTE, {host_id: (0,)}))
    await series(client, token, start + 4 * MINUTE, [("active", "active")] * 3)
    figures = await job_figures(app, ws)
    assert sum(row[0] for key, row in figures.items() if key[0] == "1") == 2 * 60 * 10**6

    # A job on a device no GPU has (yet): it matches GPU 1 once its agent reports that
    # minor number, from the interval that push closes on (devices are matched when
    # read, and the batch that renumbers a GPU reads its host's job GPUs again).
    await record(app, ws, job("2", start + 6 * MINUTE + 30 * SECOND, None, {host_id: (7,)}))
    body = observation(start + 7 * MINUTE, [kind_gpu(0, "unused"), kind_gpu(1, "active")])
    body["gpus"][1]["minorNumber"] = 7
    assert (await push(client, token, body)).status_code == 202
    await series(client, token, start + 8 * MINUTE, [("unused", "active")] * 2)
    figures = await job_figures(app, ws)
    assert sum(row[1] for key, row in figures.items() if key[0] == "2" and key[3] == 1) == (
        150 * 10**6  # [+6.5, +7), closed by the renumbering push, then [+7, +9)
    )

    # Late points hours before what the copy reaches back to: a job that ended then.
    await record(app, ws, job("3", start - 4 * HOUR, start - 3 * HOUR, {host_id: (0,)}))
    await series(client, token, start - 4 * HOUR + 10 * MINUTE, [("active", "unused")] * 3)
    figures = await job_figures(app, ws)
    assert sum(row[1] for key, row in figures.items() if key[0] == "3") == 2 * 60 * 10**6

    # Everything the kept copies credited is what a rebuild from raw gives.
    credited = (figures, await outside_hours(app, ws))
    async with await connect(app) as conn:
        async with conn.transaction():
            await rebuild_hours(conn, ws, midnight, midnight + 12 * HOUR)
    assert (await job_figures(app, ws), await outside_hours(app, ws)) == credited
