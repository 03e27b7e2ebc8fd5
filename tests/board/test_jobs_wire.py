"""Job records on the wire (docs/jobs.md, "Job records"): a node posts its own host's jobs
with its agent token, a bridge posts every node's with a scheduler's API token, readers
list them; every refusal is a 4xx with a sentence and changes nothing. Also the scheduler
role, and the fields only our own agent sends (minorNumber, a process's jobId)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.board.answers import audit_rows, refused
from tests.board.builders import Tenant, enroll, example, make_tenant, minutes_ago, push, retimed
from tests.board.db import rows, scalar
from tests.web.helpers import sign_in

PASSWORD = "correct-horse-battery"

ROOT = Path(__file__).resolve().parents[2]
START = (datetime.now(UTC) - timedelta(hours=3)).replace(microsecond=0)
WINDOW = {
    "from": (START - timedelta(days=1)).date().isoformat(),
    "to": (START + timedelta(days=2)).date().isoformat(),
}


def job(job_id: str = "4711", **fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "cluster": "hpc",
        "jobId": job_id,
        "user": "alice",
        "account": "physics",
        "partition": "gpu",
        "name": "train",
        "state": "RUNNING",
        "startedAt": START.isoformat(),
        "endedAt": None,
    }
    record.update(fields)
    return record


def agent_auth(host: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {host['agentToken']}"}


async def post_node(client: httpx.AsyncClient, host: dict[str, Any], *jobs: Any) -> httpx.Response:
    return await client.post("/agent/v1/jobs", json={"jobs": list(jobs)}, headers=agent_auth(host))


async def post_bridge(
    client: httpx.AsyncClient, slug: str, headers: dict[str, str], *jobs: Any
) -> httpx.Response:
    return await client.post(
        f"/api/v1/workspaces/{slug}/jobs", json={"jobs": list(jobs)}, headers=headers
    )


async def scheduler(client: httpx.AsyncClient, tenant: Tenant) -> dict[str, str]:
    """A scheduler member of the tenant (added by its admin), as request headers."""
    r = await client.post(
        f"/api/v1/workspaces/{tenant.slug}/members",
        json={"email": f"slurm@{tenant.slug}.example", "role": "scheduler"},
        headers=tenant.auth(),
    )
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['apiToken']}"}


async def listed(
    client: httpx.AsyncClient, tenant: Tenant, headers: dict[str, str] | None = None, **query: Any
) -> dict[str, Any]:
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/jobs",
        params={**WINDOW, **query},
        headers=headers or tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


async def stored(app: Any) -> tuple[Any, ...]:
    """Everything job records write, to show that a refusal wrote nothing."""
    return (
        await rows(app, "SELECT * FROM scheduler_jobs ORDER BY id"),
        await rows(app, "SELECT * FROM job_gpus ORDER BY job_id, host_id, device"),
        await rows(app, "SELECT * FROM cluster_hosts ORDER BY host_id"),
    )


def observed(minor: int | None = None, **process: Any) -> dict[str, Any]:
    body = retimed(example("observation-1.8.0-fake.json"), minutes_ago(1))
    if minor is not None:
        body["gpus"][0]["minorNumber"] = minor
    if process:
        body["gpus"][0]["processes"] = [
            {"pid": 4242, "linuxUser": "alice", "name": "python", "memoryUsedMb": 10, **process}
        ]
    return body


# ---- a node's records ----------------------------------------------------------------


async def test_a_node_records_its_jobs_on_its_own_host(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, hostname="node1")
    assert (await push(client, host["agentToken"], observed())).status_code == 202
    r = await post_node(client, host, job(gpus=[0, 1]), job("4712", gpus=[], user="bob"))
    assert r.status_code == 202, r.text
    assert r.json() == {"accepted": 2}
    found = (await listed(client, tenant))["jobs"]
    assert [j["jobId"] for j in found] == ["4711", "4712"]
    first = found[0]
    assert (first["rawJobId"], first["restartCount"]) == ("4711", 0)
    assert (first["user"], first["state"]) == ("alice", "RUNNING")
    assert first["endedAt"] is None
    assert datetime.fromisoformat(first["startedAt"]) == START
    [allocation] = first["allocations"]
    assert allocation["hostId"] == host["hostId"]
    gpu_uuid = example("observation-1.8.0-fake.json")["gpus"][0]["uuid"]
    # Device 0 is matched by index (the released agent reports no minor number).
    assert allocation["gpus"][0] == {"device": 0, "gpuUuid": gpu_uuid, "gpuIndex": 0}
    assert [g["device"] for g in allocation["gpus"]] == [0, 1]
    assert found[1]["allocations"] == []  # a job of no GPU on this host
    since = await scalar(app, "SELECT since FROM cluster_hosts")
    assert since == START


async def test_a_later_record_replaces_the_run_and_its_devices_here(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    assert (await post_node(client, host, job(gpus=[0, 1]))).status_code == 202
    end = START + timedelta(hours=1)
    again = job(gpus=[1], state="COMPLETED", endedAt=end.isoformat(), name="renamed")
    assert (await post_node(client, host, again)).status_code == 202
    [run] = (await listed(client, tenant))["jobs"]
    assert (run["state"], run["name"]) == ("COMPLETED", "renamed")
    assert datetime.fromisoformat(run["endedAt"]) == end
    assert [g["device"] for g in run["allocations"][0]["gpus"]] == [1]
    during = await rows(app, "SELECT lower(during), upper(during) FROM job_gpus")
    assert during == [(START, end)]
    # A requeued run (restartCount 1) is a run of its own; rawJobId names an array task.
    task = job("4711_3", rawJobId="4714", restartCount=1, gpus=[2])
    assert (await post_node(client, host, task)).status_code == 202
    runs = (await listed(client, tenant))["jobs"]
    assert [(j["jobId"], j["rawJobId"], j["restartCount"]) for j in runs] == [
        ("4711", "4711", 0),
        ("4711_3", "4714", 1),
    ]


async def test_a_node_never_erases_what_the_controller_said(app: Any, client: Any) -> None:
    """A prolog knows no name, no array id and maybe no account; a prolog record replayed
    from a node's spool after the epilog must not reopen the run."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, hostname="node1")
    headers = await scheduler(client, tenant)
    bridge = job(
        "74000_0",
        rawJobId="74001",
        name="sweep",
        account="physics",
        allocations=[{"hostname": "node1", "gpus": [0]}],
    )
    bridge.pop("gpus", None)
    assert (await post_bridge(client, tenant.slug, headers, bridge)).status_code == 202
    end = START + timedelta(minutes=30)
    epilog = job("74001", name="", account="", state="COMPLETED", endedAt=end.isoformat(), gpus=[0])
    assert (await post_node(client, host, epilog)).status_code == 202
    prolog_again = job("74001", name="", account="", gpus=[0])
    assert (await post_node(client, host, prolog_again)).status_code == 202
    [run] = (await listed(client, tenant))["jobs"]
    assert (run["jobId"], run["rawJobId"], run["name"], run["account"]) == (
        "74000_0",
        "74001",
        "sweep",
        "physics",
    )
    assert (run["state"], datetime.fromisoformat(run["endedAt"])) == ("COMPLETED", end)
    assert await rows(app, "SELECT lower(during), upper(during) FROM job_gpus") == [(START, end)]


async def test_the_controllers_times_win_whichever_path_spoke_last(app: Any, client: Any) -> None:
    """Slurm's own times (the bridge's) stand; a node's clock only fills a missing end,
    and the bridge's guess for a vanished job never replaces a known end."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, hostname="node1")
    headers = await scheduler(client, tenant)
    on_node1 = [{"hostname": "node1", "gpus": [0]}]

    def bridge(**fields: Any) -> dict[str, Any]:
        record = job("900", allocations=on_node1, **fields)
        record.pop("gpus", None)
        return record

    prolog_start = START + timedelta(seconds=1, microseconds=250_000)
    assert (
        await post_node(client, host, job("900", startedAt=prolog_start.isoformat(), gpus=[0]))
    ).status_code == 202
    assert (await post_bridge(client, tenant.slug, headers, bridge())).status_code == 202
    # The node's epilog (its own clock) fills the end the bridge has not seen yet ...
    node_end = START + timedelta(minutes=10, microseconds=400_000)
    epilog = job("900", state="COMPLETED", endedAt=node_end.isoformat(), gpus=[0])
    assert (await post_node(client, host, epilog)).status_code == 202
    [run] = (await listed(client, tenant))["jobs"]
    assert datetime.fromisoformat(run["startedAt"]) == START  # the bridge's, not the prolog's
    assert datetime.fromisoformat(run["endedAt"]) == node_end
    # ... a vanished-job guess does not replace it ...
    guess = bridge(state="UNKNOWN_END", endedAt=(START + timedelta(minutes=9)).isoformat())
    assert (await post_bridge(client, tenant.slug, headers, guess)).status_code == 202
    [run] = (await listed(client, tenant))["jobs"]
    assert (run["state"], datetime.fromisoformat(run["endedAt"])) == ("COMPLETED", node_end)
    # ... and Slurm's own end, from the bridge, does; a node's replayed end then changes nothing.
    slurm_end = START + timedelta(minutes=10)
    done = bridge(state="COMPLETED", endedAt=slurm_end.isoformat())
    assert (await post_bridge(client, tenant.slug, headers, done)).status_code == 202
    assert (await post_node(client, host, epilog)).status_code == 202
    [run] = (await listed(client, tenant))["jobs"]
    assert datetime.fromisoformat(run["endedAt"]) == slurm_end
    during = await rows(app, "SELECT lower(during), upper(during) FROM job_gpus")
    assert during == [(START, slurm_end)]


async def test_a_run_that_ended_as_it_started_has_no_time(app: Any, client: Any) -> None:
    """Slurm's whole seconds give a job that failed at once the same start and end: an
    empty range, stored, credited nothing, allocated nothing (schemathesis found a 500)."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, hostname="node1")
    assert (await push(client, host["agentToken"], observed())).status_code == 202
    instant = job("5", state="FAILED", endedAt=START.isoformat(), gpus=[0, 1])
    assert (await post_node(client, host, instant)).status_code == 202
    assert (await post_node(client, host, instant)).status_code == 202  # again: re-credited
    [run] = (await listed(client, tenant))["jobs"]
    assert run["startedAt"] == run["endedAt"]
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/jobs",
        params={**WINDOW, "groupBy": "job"},
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    assert [row["allocatedGpuHours"] for row in r.json()["rows"]] in ([], [0], [0.0])


async def test_a_node_speaks_for_its_own_host_only(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    one, two = await enroll(client, tenant, "node1"), await enroll(client, tenant, "node2")
    assert (await post_node(client, one, job(gpus=[0]))).status_code == 202
    assert (await post_node(client, two, job(gpus=[3]))).status_code == 202
    # A record of the same run from node2 replaced node1's fields, not node1's devices.
    [run] = (await listed(client, tenant))["jobs"]
    by_host = {a["hostId"]: [g["device"] for g in a["gpus"]] for a in run["allocations"]}
    assert by_host == {one["hostId"]: [0], two["hostId"]: [3]}
    # The host is the token's: a body cannot name another.
    for extra in ({"hostId": one["hostId"]}, {"hostname": "node1"}):
        before = await stored(app)
        r = await post_node(client, two, job(gpus=[1], **extra))
        refused(r, 422)
        assert await stored(app) == before


async def test_node_refusals_change_nothing(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    assert (await post_node(client, host, job(gpus=[0]))).status_code == 202
    before = await stored(app)
    late = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    bad_records = [
        job(),  # no gpus
        job(gpus=list(range(65))),
        job(gpus=[1, 1]),
        job(gpus=[-1]),
        job(gpus=[65536]),
        job(gpus=["0"]),
        job(gpus=[True]),
    ]
    for fields in (
        {"cluster": ""},
        {"cluster": "x" * 201},
        {"name": "x" * 201},
        {"user": "u" * 65},
        {"user": ""},
        {"name": "line\nbreak"},
        {"account": "nul\x00"},
        {"name": "c1\x85"},
        {"state": "running"},
        {"state": "A" * 33},
        {"state": "RUN NING"},
        {"startedAt": "2026-12-04T10:00:00"},
        {"startedAt": "yesterday"},
        {"startedAt": 1764547200},
        {"startedAt": "1999-12-31T23:00:00+00:00"},
        {"startedAt": late},
        {"endedAt": late},
        {"endedAt": (START - timedelta(seconds=1)).isoformat()},
        {"rawJobId": "12a"},
        {"rawJobId": "1" * 21},
        {"rawJobId": 4711},
        {"restartCount": -1},
        {"restartCount": "1"},
        {"restartCount": 1.0},
        {"unknown": 1},
    ):
        bad_records.append(job(gpus=[0], **fields))
    for record in bad_records:
        refused(await post_node(client, host, record), 422)
    for body in (
        {"jobs": [job(gpus=[0]), job(gpus=[1])]},  # the same run twice
        {"jobs": [job(str(n), gpus=[0]) for n in range(1001)]},
        {"jobs": "4711"},
        {"jobs": [job(gpus=[0])], "host": "node1"},
        {},
        [],
    ):
        r = await client.post("/agent/v1/jobs", json=body, headers=agent_auth(host))
        refused(r, 422, 413)
    r = await client.post(
        "/agent/v1/jobs",
        content=b"{not json",
        headers={**agent_auth(host), "Content-Type": "application/json"},
    )
    refused(r, 422, 400)
    assert await stored(app) == before


async def test_only_a_live_agent_token_posts_a_nodes_jobs(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    body = {"jobs": [job(gpus=[0])]}
    for headers in (
        {},
        {"Authorization": "Bearer nonsense"},
        tenant.auth(),  # a person's token is no agent token
        {"Authorization": "Bearer gua_agent_00000000_" + "x" * 40},
    ):
        refused(await client.post("/agent/v1/jobs", json=body, headers=headers), 401)
    r = await client.post(
        f"/api/v1/workspaces/acme/hosts/{host['hostId']}/revoke", headers=tenant.auth()
    )
    assert r.status_code in (200, 204), r.text
    refused(await post_node(client, host, job(gpus=[0])), 401)
    # A stranger learns nothing of what the endpoint accepts: 401 before 422.
    refused(await client.post("/agent/v1/jobs", json={"bogus": 1}), 401)
    assert await stored(app) == ([], [], [])


# ---- a bridge's records ----------------------------------------------------------------


async def test_a_bridge_matches_hostnames_by_short_name(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    node1 = await enroll(client, tenant, "node1.cluster.local")
    node2 = await enroll(client, tenant, "vm-17", displayName="Node2.example.org")
    await enroll(client, tenant, "twin.a")
    await enroll(client, tenant, "twin.b")
    slurm = await scheduler(client, tenant)
    record = job(
        allocations=[
            {"hostname": "NODE1", "gpus": [0, 1]},
            {"hostname": "node2.cluster.local", "gpus": [2]},
            {"hostname": "node9.cluster.local", "gpus": [0]},
            {"hostname": "twin", "gpus": [0]},
        ]
    )
    r = await post_bridge(client, "acme", slurm, record, job("4712"))
    assert r.status_code == 202, r.text
    assert r.json() == {"accepted": 2, "unmatchedHosts": ["node9.cluster.local", "twin"]}
    runs = (await listed(client, tenant, slurm))["jobs"]
    by_host = {a["hostId"]: [g["device"] for g in a["gpus"]] for a in runs[0]["allocations"]}
    assert by_host == {node1["hostId"]: [0, 1], node2["hostId"]: [2]}
    # No GPU reported yet: the devices are listed, matched to none.
    assert runs[0]["allocations"][0]["gpus"][0]["gpuUuid"] is None
    assert runs[1]["allocations"] == []
    assert await scalar(app, "SELECT count(*) FROM cluster_hosts") == 2


async def test_a_record_without_allocations_keeps_them(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    node1 = await enroll(client, tenant, "node1")
    slurm = await scheduler(client, tenant)
    running = job(allocations=[{"hostname": "node1", "gpus": [0]}])
    assert (await post_bridge(client, "acme", slurm, running)).status_code == 202
    end = START + timedelta(minutes=30)
    ended = job(state="COMPLETED", endedAt=end.isoformat())  # squeue lists no GRES any more
    r = await post_bridge(client, "acme", slurm, ended)
    assert r.json() == {"accepted": 1, "unmatchedHosts": []}
    [run] = (await listed(client, tenant))["jobs"]
    assert run["state"] == "COMPLETED"
    assert run["allocations"][0]["hostId"] == node1["hostId"]
    # The kept allocation follows the run's end.
    assert await rows(app, "SELECT upper(during) FROM job_gpus") == [(end,)]


async def test_bridge_refusals_change_nothing(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    await enroll(client, tenant, "node1")
    slurm = await scheduler(client, tenant)
    before = await stored(app)
    for record in (
        job(allocations=[{"hostname": "node1", "gpus": [0]}, {"hostname": "NODE1.x", "gpus": [1]}]),
        job(allocations=[{"hostname": "node1", "gpus": list(range(65))}]),
        job(allocations=[{"hostname": "", "gpus": [0]}]),
        job(allocations=[{"hostname": ".node1", "gpus": [0]}]),
        job(allocations=[{"hostname": "node 1", "gpus": [0]}]),
        job(allocations=[{"hostname": "n" * 256, "gpus": [0]}]),
        job(allocations=[{"hostname": "node1"}]),
        job(gpus=[0]),  # a node's field
        job(allocations=[{"hostname": f"n{i}", "gpus": [0]} for i in range(1025)]),
    ):
        refused(await post_bridge(client, "acme", slurm, record), 422, 413)
    assert await stored(app) == before


# ---- roles and workspaces --------------------------------------------------------------


async def test_who_may_post_and_read_jobs(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    await enroll(client, tenant, "node1")
    slurm = await scheduler(client, tenant)
    record = job(allocations=[{"hostname": "node1", "gpus": [0]}])
    for role in ("member", "finance"):
        refused(await post_bridge(client, "acme", tenant.auth(role), record), 403)
    assert await stored(app) == ([], [], [])
    assert (await post_bridge(client, "acme", tenant.auth(), record)).status_code == 202
    assert (await post_bridge(client, "acme", slurm, record)).status_code == 202
    for headers in (tenant.auth(), tenant.auth("member"), tenant.auth("finance"), slurm):
        assert len((await listed(client, tenant, headers))["jobs"]) == 1
    # The scheduler role reads nothing else: reports, hosts, members, the fleet.
    base = "/api/v1/workspaces/acme"
    for url in (
        f"{base}/reports/usage?from={WINDOW['from']}&to={WINDOW['to']}",
        f"{base}/hosts",
        f"{base}/members",
        f"{base}/reservations",
    ):
        refused(await client.get(url, headers=slurm), 403)
    assert (await client.get("/agent/v1/archives", headers=slurm)).status_code == 401


async def test_the_scheduler_role_is_audited_and_has_no_pages(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    before = await audit_rows(app, "acme")
    await scheduler(client, tenant)
    assert await audit_rows(app, "acme") == before + 1
    detail = await scalar(
        app, "SELECT detail FROM audit_events WHERE action = 'member.added' ORDER BY id DESC"
    )
    assert detail["role"] == "scheduler"
    # Signed in, a scheduler sees a page saying it has none, not the fleet.
    added = await client.post(
        "/api/v1/workspaces/acme/members",
        json={"email": "slurm2@acme.example", "role": "scheduler", "password": PASSWORD},
        headers=tenant.auth(),
    )
    assert added.status_code == 201, added.text
    r = await sign_in(client, "slurm2@acme.example", PASSWORD)
    assert r.status_code == 303, r.text
    for path in ("/w/acme/", "/w/acme/usage", "/w/acme/budgets", "/w/acme/reservations"):
        page = await client.get(path)
        assert page.status_code == 403, (path, page.status_code)
        assert "The scheduler role has no pages" in page.text
        assert "/w/acme/usage" not in page.text  # no navigation
    account = await client.get("/account")
    assert account.status_code == 200
    assert 'href="/w/acme/' not in account.text


async def test_workspaces_never_meet(app: Any, client: Any) -> None:
    a, b = await make_tenant(app, "acme"), await make_tenant(app, "beta")
    a_host = await enroll(client, a, "node1")
    await enroll(client, b, "node2")
    a_slurm, b_slurm = await scheduler(client, a), await scheduler(client, b)
    # B's node2 is no host of A's: unmatched there.
    record = job(allocations=[{"hostname": "node2", "gpus": [0]}])
    r = await post_bridge(client, "acme", a_slurm, record)
    assert r.json()["unmatchedHosts"] == ["node2"]
    # A's token on B's workspace: 404, nothing written to B.
    refused(await post_bridge(client, "beta", a_slurm, record), 404)
    refused(await client.get("/api/v1/workspaces/beta/jobs", params=WINDOW, headers=a_slurm), 404)
    assert (await post_node(client, a_host, job("9", gpus=[0]))).status_code == 202
    assert (await listed(client, b, b_slurm))["jobs"] == []
    assert (
        await scalar(
            app,
            "SELECT count(*) FROM scheduler_jobs j JOIN workspaces w ON w.id = j.workspace_id "
            "WHERE w.slug = 'beta'",
        )
        == 0
    )
    # The same run in B is B's own row.
    b_record = job(allocations=[{"hostname": "node2", "gpus": [1]}])
    assert (await post_bridge(client, "beta", b_slurm, b_record)).status_code == 202
    assert len((await listed(client, a, a_slurm))["jobs"]) == 2
    [b_run] = (await listed(client, b, b_slurm))["jobs"]
    assert [g["device"] for g in b_run["allocations"][0]["gpus"]] == [1]


async def test_the_list_filters_bounds_and_says_when_truncated(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    old_start = START - timedelta(days=10)
    records = [
        job("1", gpus=[0]),
        job(
            "2",
            gpus=[1],
            user="bob",
            account="chem",
            state="COMPLETED",
            endedAt=(START + timedelta(hours=1)).isoformat(),
        ),
        job(
            "3",
            gpus=[2],
            startedAt=old_start.isoformat(),
            endedAt=(old_start + timedelta(hours=1)).isoformat(),
            state="COMPLETED",
        ),
    ]
    assert (await post_node(client, host, *records)).status_code == 202
    assert [j["jobId"] for j in (await listed(client, tenant))["jobs"]] == ["1", "2"]
    assert [j["jobId"] for j in (await listed(client, tenant, user="bob"))["jobs"]] == ["2"]
    assert [j["jobId"] for j in (await listed(client, tenant, account="chem"))["jobs"]] == ["2"]
    assert [j["jobId"] for j in (await listed(client, tenant, state="RUNNING"))["jobs"]] == ["1"]
    one = await listed(client, tenant, limit=1)
    assert (one["truncated"], len(one["jobs"])) == (True, 1)
    assert (await listed(client, tenant))["truncated"] is False
    url = "/api/v1/workspaces/acme/jobs"
    for query in (
        {"from": WINDOW["from"]},
        {**WINDOW, "limit": 0},
        {**WINDOW, "limit": 5001},
        {**WINDOW, "limit": "many"},
        {"from": WINDOW["to"], "to": WINDOW["from"]},
        {"from": "2026-12-01T10:30:00Z", "to": WINDOW["to"]},
        {**WINDOW, "user": "u" * 201},
        {**WINDOW, "tz": "Mars/Olympus"},
    ):
        refused(await client.get(url, params=query, headers=tenant.auth()), 422)


# ---- what only our own agent sends ---------------------------------------------------


async def test_minor_numbers_are_stored_and_match_devices(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    minor = "SELECT minor_number FROM gpus WHERE gpu_index = 0"
    assert (await push(client, host["agentToken"], observed())).status_code == 202
    assert await scalar(app, minor) is None
    assert (await push(client, host["agentToken"], observed(3))).status_code == 202
    assert await scalar(app, minor) == 3
    # The released agent's push keeps the minor number known; a change is stored.
    assert (await push(client, host["agentToken"], observed())).status_code == 202
    assert await scalar(app, minor) == 3
    assert (await push(client, host["agentToken"], observed(5))).status_code == 202
    assert await scalar(app, minor) == 5
    # Slurm's device 5 is this GPU (index 0) now; device 0 is none.
    assert (await post_node(client, host, job(gpus=[0, 5]))).status_code == 202
    gpus = (await listed(client, tenant))["jobs"][0]["allocations"][0]["gpus"]
    uuid = example("observation-1.8.0-fake.json")["gpus"][0]["uuid"]
    assert gpus == [
        {"device": 0, "gpuUuid": None, "gpuIndex": None},
        {"device": 5, "gpuUuid": uuid, "gpuIndex": 0},
    ]


async def test_a_process_job_is_checked_and_not_stored(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    ok = observed(0, jobId="4711", cluster="hpc")
    assert (await push(client, host["agentToken"], ok)).status_code == 202
    for bad in (
        observed(jobId=""),
        observed(jobId="j" * 65),
        observed(jobId="4711\n"),
        observed(cluster="c\x9b"),
        observed(jobId=4711),
        observed(minor=-1),
        observed(minor=65536),
    ):
        refused(await push(client, host["agentToken"], bad), 422)
    assert await scalar(app, "SELECT count(*) FROM scheduler_jobs") == 0


async def test_the_released_agents_payload_is_unchanged(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    body = retimed(example("observation-1.8.0-fake.json"))
    sent = copy.deepcopy(body)
    r = await push(client, host["agentToken"], body)
    assert r.status_code == 202, r.text
    assert body == sent
    assert "minorNumber" not in json.dumps(sent)
    assert await rows(app, "SELECT DISTINCT minor_number FROM gpus") == [(None,)]


def test_create_user_takes_the_scheduler_role(database_url: str) -> None:
    env = {"GUA_BOARD_DATABASE_URL": database_url, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-c", "from board.cli import main; main()"]
    for args in (
        ["create-workspace", "hpc"],
        ["create-user", "slurm@hpc.example", "--workspace", "hpc", "--role", "scheduler", "--json"],
    ):
        done = subprocess.run([*run, *args], env=env, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert json.loads(done.stdout)["role"] == "scheduler"
