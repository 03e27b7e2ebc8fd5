"""Hostile inputs on the scheduler jobs' surface (docs/jobs.md): what a node's agent token,
a bridge's scheduler token or a reader may send, and what the board must still answer.

Each test pins a finding: text that reads as something else (line separators, bidi
overrides), thousands of long overlapping runs (sums past 2**63, a day report testing
every allocation against every day, a list of millions of devices), an account longer
than the report's filter took, the bounds of the times a record may carry, and what the
scheduler role may read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from board.jobs.queries import MAX_DEVICES
from board.jobs.service import MAX_RUNS_IN_FORCE_PER_HOST
from tests.board.answers import refused
from tests.board.builders import Tenant, enroll, make_tenant
from tests.board.test_jobs_wire import job, post_bridge, post_node, scheduler, stored


async def report(client: httpx.AsyncClient, tenant: Tenant, **query: Any) -> dict[str, Any]:
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/jobs", params=query, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text[:300]
    body: dict[str, Any] = r.json()
    return body


# ---- text that reads as something else -------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "line\u2028separator",
        "para\u2029graph",
        "\u202egnp.exe",  # right-to-left override
        "iso\u2066late\u2069",
        "emb\u202aed",
    ],
)
async def test_line_separators_and_bidi_controls_are_refused(
    app: Any, client: Any, text: str
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, hostname="node1")
    slurm = await scheduler(client, tenant)
    before = await stored(app)
    for field in ("cluster", "jobId", "user", "account", "partition", "name"):
        refused(await post_node(client, host, job(gpus=[0], **{field: text})), 422)
        refused(await post_bridge(client, "acme", slurm, job(**{field: text})), 422)
    allocation = {"hostname": f"node1{text}", "gpus": [0]}
    refused(await post_bridge(client, "acme", slurm, job(allocations=[allocation])), 422)
    assert await stored(app) == before


async def test_other_scripts_and_formula_prefixes_are_names(app: Any, client: Any) -> None:
    """What is refused above is only what reads as something else: any script, and text
    a spreadsheet would take for a formula, are names (the CSV makes them safe)."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, hostname="node1")
    names = ["обучение", "训练", "تدريب", "=1+2", "+x", "-x", "@x"]
    records = [job(str(n), name=name, gpus=[0]) for n, name in enumerate(names)]
    r = await post_node(client, host, *records)
    assert r.status_code == 202, r.text


# ---- thousands of long overlapping runs ------------------------------------------------

RUNS, DEVICES, DAYS = 5_000, 64, 400


async def test_thousands_of_long_runs_neither_overflow_nor_flood_an_answer(
    app: Any, client: Any
) -> None:
    """One node records 5,000 runs of 64 devices each, from 2000 until yesterday (its own
    host, within every bound a record has; that many running at once are refused, below).
    Over a 400-day window their allocated time is
    1.1e19 µs: past bigint, which the report once cast its sums to (a 500 for the whole
    workspace), and the day rows tested each of 320,000 allocations against each of 400
    days (a minute of the database). The list of 5,000 such runs is cut at MAX_DEVICES."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, hostname="node1")
    epoch = datetime(2000, 1, 1, tzinfo=UTC)
    # A window in the past, so every run counts its whole length in it.
    end = datetime.now(UTC).date() - timedelta(days=1)
    ended = datetime(end.year, end.month, end.day, tzinfo=UTC).isoformat()
    for batch in range(RUNS // 1_000):
        records = [
            job(
                str(n),
                state="COMPLETED",
                startedAt=(epoch + timedelta(seconds=n)).isoformat(),
                endedAt=ended,
                gpus=list(range(DEVICES)),
            )
            for n in range(batch * 1_000, (batch + 1) * 1_000)
        ]
        assert (await post_node(client, host, *records)).status_code == 202
    window = {"from": (end - timedelta(days=DAYS)).isoformat(), "to": end.isoformat()}
    per_run = DEVICES * DAYS * 24.0
    assert RUNS * per_run * 3.6e9 > 2**63  # what the sums came to

    for group in ("user", "account", "partition"):
        body = await report(client, tenant, groupBy=group, **window)
        [row] = body["rows"]
        assert row["allocatedGpuHours"] == RUNS * per_run
        assert body["totals"]["allocatedGpuHours"] == RUNS * per_run
    per_job = await report(client, tenant, **window)
    assert per_job["rowCount"] == RUNS
    assert {r["allocatedGpuHours"] for r in per_job["rows"]} == {per_run}
    assert per_job["totals"]["allocatedGpuHours"] == RUNS * per_run
    days = await report(client, tenant, groupBy="day", **window)
    assert len(days["rows"]) == DAYS
    assert {r["allocatedGpuHours"] for r in days["rows"]} == {RUNS * DEVICES * 24.0}
    assert days["totals"]["allocatedGpuHours"] == RUNS * per_run
    csv = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/jobs",
        params={**window, "groupBy": "user", "format": "csv"},
        headers=tenant.auth(),
    )
    assert csv.status_code == 200
    assert f"alice,{RUNS * per_run:.6f}," in csv.text

    listed = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/jobs",
        params={**window, "limit": 5_000},
        headers=tenant.auth("finance"),
    )
    assert listed.status_code == 200
    found = listed.json()
    assert found["truncated"] is True
    assert len(found["jobs"]) == MAX_DEVICES // DEVICES
    assert [j["jobId"] for j in found["jobs"]] == [str(n) for n in range(len(found["jobs"]))]
    assert all(len(j["allocations"][0]["gpus"]) == DEVICES for j in found["jobs"])
    within = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/jobs",
        params={**window, "limit": 3_000},
        headers=tenant.auth("finance"),
    )
    assert (len(within.json()["jobs"]), within.json()["truncated"]) == (3_000, True)


async def test_local_days_of_long_runs_across_a_dst_change(app: Any, client: Any) -> None:
    """The day rows' allocations, summed per range and met only with the days each range
    spans: Berlin's 29 March 2026 has 23 hours; A began long before the window, C still
    runs at its end."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, hostname="node1")

    def utc(text: str) -> str:
        return f"2026-03-{text}:00+00:00"

    records = [
        job("1", startedAt="2026-03-01T00:00:00+00:00", endedAt=utc("30T12:00"), gpus=[0, 1, 2]),
        job("2", startedAt=utc("28T22:00"), endedAt=utc("29T02:00"), gpus=[3]),
        job("3", startedAt=utc("31T20:00"), endedAt=None, gpus=[4]),
    ]
    assert (await post_node(client, host, *records)).status_code == 202
    window = {"from": "2026-03-27", "to": "2026-04-01", "tz": "Europe/Berlin"}
    body = await report(client, tenant, groupBy="day", **window)
    assert {r["day"]: r["allocatedGpuHours"] for r in body["rows"]} == {
        "2026-03-27": 72.0,  # A: 24 h x 3
        "2026-03-28": 73.0,  # A, and B's first hour (23:00 local)
        "2026-03-29": 72.0,  # A: 23 h x 3, and B's 3 hours to 04:00 CEST
        "2026-03-30": 42.0,  # A until 14:00 CEST
        "2026-03-31": 2.0,  # C from 22:00 CEST to the window's end
    }
    per_job = await report(client, tenant, **window)
    assert per_job["totals"]["allocatedGpuHours"] == body["totals"]["allocatedGpuHours"] == 261.0


# ---- filters ---------------------------------------------------------------------------


async def test_an_account_as_long_as_a_record_takes_is_a_filter(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, hostname="node1")
    account = "a" * 200
    start = (datetime.now(UTC) - timedelta(hours=3)).replace(microsecond=0)
    r = await post_node(client, host, job(account=account, startedAt=start.isoformat(), gpus=[0]))
    assert r.status_code == 202
    later = (start + timedelta(days=2)).date()
    window = {"from": start.date().isoformat(), "to": later.isoformat()}
    body = await report(client, tenant, account=account, **window)
    assert [row["account"] for row in body["rows"]] == [account]
    refused(
        await client.get(
            f"/api/v1/workspaces/{tenant.slug}/reports/jobs",
            params={**window, "account": account + "a"},
            headers=tenant.auth(),
        ),
        422,
    )


# ---- times at the bounds ---------------------------------------------------------------


@pytest.mark.parametrize(
    "moment",
    [
        "2000-01-01T00:59:59+01:00",  # 1999-12-31T23:59:59Z
        "0001-01-01T00:00:00+00:01",  # before year 1 in UTC
        "9999-12-31T23:59:59-23:59",  # after year 9999 in UTC
        "294276-01-01T00:00:00Z",  # PostgreSQL's last year, not ISO 8601
        "2026-12-04T21:13:46" + "0" * 100 + "Z",
        "",
    ],
)
async def test_times_past_the_bounds_are_refused(app: Any, client: Any, moment: str) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, hostname="node1")
    before = await stored(app)
    refused(await post_node(client, host, job(startedAt=moment, gpus=[0])), 422)
    refused(await post_node(client, host, job(endedAt=moment, gpus=[0])), 422)
    assert await stored(app) == before


async def test_the_first_instant_of_2000_in_any_offset_is_taken(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, hostname="node1")
    r = await post_node(
        client,
        host,
        job("1", startedAt="2000-01-01T00:00:00Z", gpus=[0]),
        job("2", startedAt="2000-01-01T14:00:00+14:00", endedAt="2000-01-01T00:00:00Z", gpus=[1]),
    )
    assert r.status_code == 202, r.text


# ---- the scheduler role ----------------------------------------------------------------


async def test_a_scheduler_token_reads_no_report_and_maps_no_account(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    await make_tenant(app, "beta")
    slurm = await scheduler(client, tenant)
    base = "/api/v1/workspaces/acme"
    window = "from=2026-11-01&to=2026-11-02"
    for url in (f"{base}/reports/jobs?{window}", f"{base}/directory"):
        refused(await client.get(url, headers=slurm), 403)
    r = await client.put(f"{base}/directory/accounts/physics", json={"team": "x"}, headers=slurm)
    refused(r, 403)
    # Another workspace's jobs: neither read nor written.
    refused(await client.get(f"/api/v1/workspaces/beta/jobs?{window}", headers=slurm), 404)
    refused(await post_bridge(client, "beta", slurm, job()), 404)


async def test_more_runs_in_force_on_a_host_than_it_takes_are_refused(
    app: Any, client: Any
) -> None:
    """Every ingest batch of a host reads each run holding its devices, so a sender that
    records thousands of running runs on one host (a node for its own, a bridge for any)
    would make every push of it slower. MAX_RUNS_IN_FORCE_PER_HOST running or ending
    later are taken; one more is a 422 that stores nothing of its request; ended runs do
    not count."""
    tenant = await make_tenant(app, "crowd")
    host = await enroll(client, tenant, hostname="node1")
    started = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    running = [
        job(str(n), startedAt=started, gpus=[n % 8]) for n in range(MAX_RUNS_IN_FORCE_PER_HOST)
    ]
    assert (await post_node(client, host, *running)).status_code == 202
    one_more = job("extra", startedAt=started, gpus=[0])
    ended_one = job(
        "done",
        state="COMPLETED",
        startedAt=started,
        endedAt=(datetime.now(UTC) - timedelta(minutes=5)).isoformat(),
        gpus=[1],
    )
    before = await stored(app)
    detail = refused(await post_node(client, host, ended_one, one_more), 422)
    assert str(MAX_RUNS_IN_FORCE_PER_HOST) in detail
    assert "node1" in detail
    assert await stored(app) == before
    # Ended runs are not in force: taken beside the full host.
    assert (await post_node(client, host, ended_one)).status_code == 202
    # Ending one running run makes room for the next.
    first_ended = {**running[0], "state": "COMPLETED", "endedAt": ended_one["endedAt"]}
    assert (await post_node(client, host, first_ended, one_more)).status_code == 202
