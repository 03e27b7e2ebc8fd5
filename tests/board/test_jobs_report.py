"""The jobs report: figures hand-computed from figure rows written as crediting writes
them, per job, user, account (with its team), partition and local day; clipping to the
window (allocations and hours), a running job counted up to now, the filters, the sort
and the row limit, CSV (formula-safe), totals, an empty window, bad parameters (422 with
a sentence), another workspace (404), finance may read; and the usage report's
outsideJobGpuHours."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from board.jobs.report import jobs_report as build_report
from board.jobs.report import parse_query
from board.reportkit.params import parse_window
from tests.board.builders import Tenant
from tests.board.jobs_report_builders import (
    Fleet,
    add_figure,
    add_job,
    add_outside,
    connect,
    fleet,
    jobs_report,
)
from tests.board.test_reports_builders import quick_tenant, report

DAY = datetime(2026, 11, 2, tzinfo=UTC)
H = timedelta(hours=1)
WINDOW = {"from": "2026-11-02T00:00:00Z", "to": "2026-11-02T06:00:00Z"}


def at(hours: float) -> datetime:
    return DAY + timedelta(hours=hours)


async def _scenario(app: Any, client: httpx.AsyncClient) -> tuple[Tenant, Fleet, dict[str, str]]:
    """Job A (alice, proj-a): 2 GPUs from 23:30 the day before to 02:30, its name a
    formula. Job B (bob, proj-b): 1 GPU from 04:00, still running. Job C (alice) ended
    the day before. proj-a belongs to the team vision."""
    tenant = await quick_tenant(app, "jobrep")
    where = await fleet(app, client, tenant)
    a, a_public = await add_job(
        app, where, "4711", "alice", "proj-a", "gpu", at(-0.5), at(2.5), [0, 1], name="=1+2"
    )
    b, b_public = await add_job(
        app, where, "4712", "bob", "proj-b", "big", at(4), None, [2], state="RUNNING"
    )
    c, _ = await add_job(app, where, "4700", "alice", "proj-a", "gpu", at(-14), at(-12), [0])
    # A, GPU 0: the hour before the window (memory 9000 must not count), then 00-03.
    await add_figure(app, where, a, 0, at(-1), active=0.5, util=90, memory=9000)
    await add_figure(
        app, where, a, 0, at(0), active=0.5, idle_held=0.25, unused=0.25, util=60, memory=1000
    )
    await add_figure(app, where, a, 0, at(1), active=0.5, util=80, memory=3000)  # half seen
    await add_figure(app, where, a, 0, at(2), unused=0.5)
    # A, GPU 1: someone else's process, then nothing at all, then idle-held.
    await add_figure(app, where, a, 1, at(0), foreign=1)
    await add_figure(app, where, a, 1, at(1), unused=1)
    await add_figure(app, where, a, 1, at(2), idle_held=0.5, memory=500)
    # B: one busy hour, then unobserved.
    await add_figure(app, where, b, 2, at(4), active=1, util=100, memory=40000)
    await add_figure(app, where, c, 0, at(-13), unused=1)
    r = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/directory/accounts/proj-a",
        json={"team": "vision"},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"account": "proj-a", "team": "vision"}
    return tenant, where, {"a": a_public, "b": b_public}


# Job A in the window, by hand: allocated [00:00, 02:30) × 2 GPUs = 5 h; covered
# 1 + 0.5 + 0.5 (GPU 0) + 1 + 1 + 0.5 (GPU 1) = 4.5 h; active 1, idle-held 0.75,
# foreign 1, unused 1.75; utilization (60 × 0.5 + 80 × 0.5) / 4.5.
A = {
    "allocatedGpuHours": 5.0,
    "coveredGpuHours": 4.5,
    "activeGpuHours": 1.0,
    "idleHeldGpuHours": 0.75,
    "foreignGpuHours": 1.0,
    "unusedGpuHours": 1.75,
    "wastedGpuHours": 2.5,
    "efficiency": 0.222222,
    "avgUtilPct": 15.555556,
    "maxMemoryUsedMb": 3000,
}
# Job B: allocated [04:00, 06:00) (the window ends before now); one hour seen, active.
B = {
    "allocatedGpuHours": 2.0,
    "coveredGpuHours": 1.0,
    "activeGpuHours": 1.0,
    "idleHeldGpuHours": 0.0,
    "foreignGpuHours": 0.0,
    "unusedGpuHours": 0.0,
    "wastedGpuHours": 0.0,
    "efficiency": 1.0,
    "avgUtilPct": 100.0,
    "maxMemoryUsedMb": 40000,
}
FIGURES = list(A)


def _figures(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in FIGURES}


async def test_per_job_figures_sorted_by_waste_with_totals(app, client) -> None:
    tenant, _, public = await _scenario(app, client)
    body = await jobs_report(client, tenant, **WINDOW)
    assert body["groupBy"] == "job"
    assert body["sort"] == "wasted"
    assert (body["rowCount"], body["truncated"], body["rowLimit"]) == (2, False, 5000)
    first, second = body["rows"]
    assert _figures(first) == A
    assert _figures(second) == B
    assert {k: first[k] for k in ("cluster", "jobId", "user", "account", "partition")} == {
        "cluster": "hpc",
        "jobId": "4711",
        "user": "alice",
        "account": "proj-a",
        "partition": "gpu",
    }
    assert first["publicId"] == public["a"]
    assert second["publicId"] == public["b"]
    assert first["startedAt"] == "2026-11-01T23:30:00+00:00"
    assert first["endedAt"] == "2026-11-02T02:30:00+00:00"
    assert (second["endedAt"], second["state"], first["name"]) == (None, "RUNNING", "=1+2")
    assert body["totals"] == {
        "allocatedGpuHours": 7.0,
        "coveredGpuHours": 5.5,
        "activeGpuHours": 2.0,
        "idleHeldGpuHours": 0.75,
        "foreignGpuHours": 1.0,
        "unusedGpuHours": 1.75,
        "wastedGpuHours": 2.5,
        "efficiency": 0.363636,
        "avgUtilPct": round((30 + 40 + 100) / 5.5, 6),
        "maxMemoryUsedMb": 40000,
    }
    by_start = await jobs_report(client, tenant, sort="key", **WINDOW)
    assert [r["jobId"] for r in by_start["rows"]] == ["4711", "4712"]
    by_allocation = await jobs_report(client, tenant, sort="allocated", **WINDOW)
    assert [r["jobId"] for r in by_allocation["rows"]] == ["4711", "4712"]


async def test_a_window_clips_allocations_and_hours(app, client) -> None:
    tenant, _, _ = await _scenario(app, client)
    body = await jobs_report(
        client, tenant, **{"from": "2026-11-02T01:00:00Z", "to": "2026-11-02T03:00:00Z"}
    )
    [row] = body["rows"]  # B starts after the window, C ended before it
    # [01:00, 02:30) × 2; hours 01 and 02: 0.5 + 0.5 (GPU 0) + 1 + 0.5 (GPU 1).
    assert _figures(row) == {
        "allocatedGpuHours": 3.0,
        "coveredGpuHours": 2.5,
        "activeGpuHours": 0.5,
        "idleHeldGpuHours": 0.5,
        "foreignGpuHours": 0.0,
        "unusedGpuHours": 1.5,
        "wastedGpuHours": 2.0,
        "efficiency": 0.2,
        "avgUtilPct": 16.0,
        "maxMemoryUsedMb": 3000,
    }


async def test_a_running_job_counts_up_to_now(app, client) -> None:
    tenant, where, _ = await _scenario(app, client)
    window = parse_window(WINDOW["from"], WINDOW["to"], None)
    query = parse_query(window, "user", None, "bob", None)
    async with await connect(app) as conn:
        found = await build_report(conn, where.ws, query, now=at(5) + timedelta(minutes=30))
    [row] = found.rows
    assert row["user"] == "bob"
    assert row["allocatedGpuHours"] == 1.5


async def test_per_user_account_partition(app, client) -> None:
    tenant, _, _ = await _scenario(app, client)
    users = await jobs_report(client, tenant, groupBy="user", **WINDOW)
    assert [(r["user"], _figures(r)) for r in users["rows"]] == [("alice", A), ("bob", B)]
    assert users["sort"] == "key"
    accounts = await jobs_report(client, tenant, groupBy="account", **WINDOW)
    assert [(r["account"], r["team"], _figures(r)) for r in accounts["rows"]] == [
        ("proj-a", "vision", A),
        ("proj-b", None, B),
    ]
    wasted_first = await jobs_report(client, tenant, groupBy="partition", sort="wasted", **WINDOW)
    assert [(r["partition"], _figures(r)) for r in wasted_first["rows"]] == [
        ("gpu", A),
        ("big", B),
    ]
    # Rows carry only their key's fields.
    assert set(users["rows"][0]) == {"user", *FIGURES}
    assert set(accounts["rows"][0]) == {"account", "team", *FIGURES}


async def test_filters(app, client) -> None:
    tenant, _, _ = await _scenario(app, client)
    alice = await jobs_report(client, tenant, user="alice", **WINDOW)
    assert [r["jobId"] for r in alice["rows"]] == ["4711"]
    assert alice["totals"]["allocatedGpuHours"] == 5.0
    assert alice["user"] == "alice"
    proj_b = await jobs_report(client, tenant, account="proj-b", groupBy="day", **WINDOW)
    assert [(r["day"], _figures(r)) for r in proj_b["rows"]] == [("2026-11-02", B)]
    nobody = await jobs_report(client, tenant, user="carol", **WINDOW)
    assert nobody["rows"] == []
    assert nobody["rowCount"] == 0


async def test_local_days(app, client) -> None:
    """New York (UTC-5 from 1 November 2026): UTC 00-05 is the evening of 1 November,
    UTC 05-06 the first hour of 2 November. B's allocation is cut at local midnight."""
    tenant, _, _ = await _scenario(app, client)
    body = await jobs_report(client, tenant, groupBy="day", tz="America/New_York", **WINDOW)
    assert body["from"] == "2026-11-01T19:00:00-05:00"
    first, second = body["rows"]
    assert first["day"] == "2026-11-01"
    assert first["allocatedGpuHours"] == 6.0
    assert first["coveredGpuHours"] == 5.5
    assert first["wastedGpuHours"] == 2.5
    assert first["maxMemoryUsedMb"] == 40000
    assert second["day"] == "2026-11-02"
    assert second["allocatedGpuHours"] == 1.0
    assert second["coveredGpuHours"] == 0.0
    assert second["efficiency"] is None
    assert second["avgUtilPct"] is None
    assert second["maxMemoryUsedMb"] is None
    utc = await jobs_report(client, tenant, groupBy="day", **WINDOW)
    assert [r["day"] for r in utc["rows"]] == ["2026-11-02"]
    assert utc["totals"] == body["totals"]


async def test_row_limit_keeps_the_totals_whole(app, client) -> None:
    tenant, where, _ = await _scenario(app, client)
    window = parse_window(WINDOW["from"], WINDOW["to"], None)
    async with await connect(app) as conn:
        found = await build_report(
            conn, where.ws, parse_query(window, None, None, None, None), row_limit=1
        )
    assert [r["jobId"] for r in found.rows] == ["4711"]
    assert (found.head.row_count, found.head.truncated) == (2, True)
    assert found.totals.allocated_gpu_hours == 7.0


async def test_csv(app, client) -> None:
    tenant, _, _ = await _scenario(app, client)
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/jobs",
        params={**WINDOW, "format": "csv"},
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert (
        f'filename="{tenant.slug}-jobs-2026-11-02-2026-11-02.csv"'
        in r.headers["content-disposition"]
    )
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0][:10] == [
        "cluster",
        "jobId",
        "publicId",
        "user",
        "account",
        "partition",
        "name",
        "state",
        "startedAt",
        "endedAt",
    ]
    assert rows[0][10:] == FIGURES
    # The job's name is a formula to a spreadsheet: written as text.
    assert rows[1][6] == "'=1+2"
    assert rows[1][10:] == [
        "5.000000",
        "4.500000",
        "1.000000",
        "0.750000",
        "1.000000",
        "1.750000",
        "2.500000",
        "0.222222",
        "15.555556",
        "3000",
    ]
    assert rows[2][9] == ""
    assert len(rows) == 3


async def test_an_empty_window(app, client) -> None:
    tenant, _, _ = await _scenario(app, client)
    body = await jobs_report(client, tenant, **{"from": "2026-10-01", "to": "2026-10-02"})
    assert body["rows"] == []
    assert body["rowCount"] == 0
    assert not body["truncated"]
    assert body["totals"]["allocatedGpuHours"] == 0.0
    assert body["totals"]["efficiency"] is None
    assert body["totals"]["maxMemoryUsedMb"] is None


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"groupBy": "host"}, "groupBy 'host' is unknown"),
        ({"sort": "cost"}, "sort 'cost' is unknown"),
        ({"format": "xml"}, "format 'xml' is unknown"),
        ({"tz": "Mars/Olympus"}, "is not an IANA time zone"),
        ({"user": "a" * 65}, "at most 64 characters"),
        ({"account": "x\ny"}, "without control characters"),
        ({"to": "2026-11-01"}, "must be after from"),
        ({"from": "2026-11-02T00:30:00Z"}, "not on a whole hour"),
    ],
)
async def test_bad_parameters(app, client, params: dict[str, str], words: str) -> None:
    tenant = await quick_tenant(app, "jobbad")
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/jobs",
        params={**WINDOW, **params},
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 422, r.text
    assert isinstance(r.json()["detail"], str)
    assert words in r.json()["detail"]


async def test_from_is_required(app, client) -> None:
    tenant = await quick_tenant(app, "jobbad")
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/jobs",
        params={"to": "2026-11-02"},
        headers=tenant.auth("member"),
    )
    assert r.status_code == 422
    assert "from is required" in r.json()["detail"]


async def test_another_workspace_is_not_found(app, client) -> None:
    tenant, _, _ = await _scenario(app, client)
    other = await quick_tenant(app, "jobother")
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/jobs",
        params=WINDOW,
        headers=other.auth("admin"),
    )
    assert r.status_code == 404, r.text
    assert isinstance(r.json()["detail"], str)
    # Its own report sees none of the first workspace's jobs.
    assert (await jobs_report(client, other, **WINDOW))["rows"] == []
    r = await client.get(f"/api/v1/workspaces/{tenant.slug}/reports/jobs", params=WINDOW)
    assert r.status_code == 401


async def test_account_teams_in_the_directory(app, client) -> None:
    tenant, _, _ = await _scenario(app, client)
    url = f"/api/v1/workspaces/{tenant.slug}/directory"
    listed = (await client.get(url, headers=tenant.auth("finance"))).json()
    assert listed["accounts"] == [{"account": "proj-a", "team": "vision"}]
    # Only an admin may set one; a bad team or account is a 422 with a sentence.
    r = await client.put(
        f"{url}/accounts/proj-b", json={"team": "x"}, headers=tenant.auth("member")
    )
    assert r.status_code == 403
    r = await client.put(f"{url}/accounts/proj-b", json={"team": "a\u202eb"}, headers=tenant.auth())
    assert r.status_code == 422
    assert isinstance(r.json()["detail"], str)
    r = await client.put(f"{url}/accounts/{'p' * 65}", json={"team": "x"}, headers=tenant.auth())
    assert r.status_code == 422
    assert isinstance(r.json()["detail"], str)
    r = await client.put(
        f"{url}/accounts/proj-b", json={"team": "x", "y": 1}, headers=tenant.auth()
    )
    assert r.status_code == 422
    # Moved, then forgotten: the report follows the map as it is now.
    r = await client.put(f"{url}/accounts/proj-a", json={"team": "nlp"}, headers=tenant.auth())
    assert r.json() == {"account": "proj-a", "team": "nlp"}
    rows = (await jobs_report(client, tenant, groupBy="account", **WINDOW))["rows"]
    assert rows[0]["team"] == "nlp"
    r = await client.put(f"{url}/accounts/proj-a", json={"team": None}, headers=tenant.auth())
    assert r.status_code == 200
    assert r.json() is None
    rows = (await jobs_report(client, tenant, groupBy="account", **WINDOW))["rows"]
    assert rows[0]["team"] is None
    audit = await client.get(f"/api/v1/workspaces/{tenant.slug}/audit-log", headers=tenant.auth())
    assert "directory.account_put" in audit.text


async def test_usage_user_rows_add_outside_job_hours(app, client) -> None:
    tenant, where, _ = await _scenario(app, client)
    await add_outside(app, where, 1, "alice", at(3), 0.25)
    await add_outside(app, where, 2, "alice", at(3), 0.5)
    await add_outside(app, where, 2, "alice", at(30), 1)  # another day
    await add_outside(app, where, 0, "carol", at(-5), 1)  # before the window
    # Held hours for alice and bob (the usage rows outside time belongs to).
    async with await connect(app) as conn:
        for user in ("alice", "bob"):
            await conn.execute(
                "INSERT INTO user_hour_rollups (workspace_id, gpu_id, linux_user, hour_start, "
                "host_id, held_us, active_us, idle_held_us) VALUES (%s, %s, %s, %s, %s, %s, 0, %s)",
                [where.ws, where.gpus[2], user, at(3), where.host_id, 3_600_000_000, 3_600_000_000],
            )
    params = {"from": "2026-11-02", "to": "2026-11-03"}
    for group in ("user", "team,user", "user,day"):
        body = await report(client, tenant, "usage", groupBy=group, **params)
        found = {r["user"]: r["outsideJobGpuHours"] for r in body["rows"]}
        assert found == {"alice": 0.75, "bob": 0.0}, group
        streamed_csv = await client.get(
            f"/api/v1/workspaces/{tenant.slug}/reports/usage",
            params={**params, "groupBy": group, "format": "csv"},
            headers=tenant.auth("finance"),
        )
        lines = list(csv.DictReader(io.StringIO(streamed_csv.text)))
        assert {r["user"]: r["outsideJobGpuHours"] for r in lines} == {
            "alice": "0.750000",
            "bob": "0.000000",
        }
    # Rows not keyed by user have no such field.
    team = await report(client, tenant, "usage", groupBy="team", **params)
    assert "outsideJobGpuHours" not in team["rows"][0]
