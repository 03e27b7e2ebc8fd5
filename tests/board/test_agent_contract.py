"""Payloads exactly as released agents send them are accepted and shown right."""

from __future__ import annotations

import copy
from datetime import timedelta

from tests.board.builders import enroll, example, make_tenant, minutes_ago, push, retimed
from tests.board.db import scalar


async def _host(client, tenant, host_id, role="member"):
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/hosts/{host_id}", headers=tenant.auth(role)
    )
    assert r.status_code == 200, r.text
    return r.json()


async def test_claim_answers_the_four_fields(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    issued = await client.post(
        "/api/v1/workspaces/acme/enrollment-tokens", json={}, headers=tenant.auth()
    )
    body = example("claim-request-1.3.0.json") | {
        "enrollmentToken": issued.json()["enrollmentToken"]
    }
    r = await client.post("/agent/v1/enrollments/claim", json=body)
    assert r.status_code == 201
    data = r.json()
    assert set(data) == {"hostId", "displayName", "agentToken", "tokenPrefix"}
    assert all(isinstance(v, str) and v for v in data.values())
    assert data["displayName"] == "vm"  # derived from the hostname
    assert data["agentToken"].startswith("gua_agent_")
    assert data["agentToken"].startswith(data["tokenPrefix"])
    assert len(data["agentToken"]) > len(data["tokenPrefix"]) + 40


async def test_agent_130_snapshot_derives_states(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    r = await push(client, host["agentToken"], retimed(example("observation-1.3.0-fake.json")))
    assert r.status_code == 202
    shown = await _host(client, tenant, host["hostId"])
    assert shown["freshness"] == "ok"
    assert shown["agentVersion"] == "1.3.0"
    # No usageState sent: compute process + util 80 → active; util 2 → idle_held; none → idle.
    assert [g["usageState"] for g in shown["gpus"]] == ["active", "idle_held", "idle"]
    assert shown["gpus"][0]["processes"][0] == {
        "pid": 1234,
        "linuxUser": "alice",
        "name": "python",
        "type": "compute",
        "memoryUsedMb": 70000,
        "jobId": None,  # the released agent names no job
    }


async def test_agent_180_snapshot_with_oversized_and_null_process_memory(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    body = retimed(example("observation-1.8.0-fake.json"))
    body["gpus"][1]["processes"][1]["memoryUsedMb"] = None
    r = await push(client, host["agentToken"], body)
    assert r.status_code == 202, r.text
    shown = await _host(client, tenant, host["hostId"])
    gpus = shown["gpus"]
    assert gpus[0]["processes"][0]["memoryUsedMb"] == 70000  # above the card's 49140
    assert gpus[1]["processes"][1]["memoryUsedMb"] is None
    assert gpus[2]["processes"][0]["type"] == "graphics"
    assert [g["usageState"] for g in gpus] == ["active", "idle_held", "idle"]
    assert await scalar(app, "SELECT count(*) FROM process_samples") == 4


async def test_partial_snapshot(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    body = retimed(example("observation-1.8.0-fake.json"))
    body["collectionStatus"] = "partial"
    body["errors"] = ["process_list_unavailable"]
    del body["gpus"][1]["usageState"]
    body["gpus"][1]["processes"] = []
    r = await push(client, host["agentToken"], body)
    assert r.status_code == 202, r.text
    shown = await _host(client, tenant, host["hostId"])
    assert shown["freshness"] == "partial"
    assert shown["collectionStatus"] == "partial"
    assert shown["errors"] == ["process_list_unavailable"]
    assert shown["gpus"][1]["usageState"] == "idle"  # derived: no process list, no holder


async def test_error_heartbeat_is_alive_but_not_ok(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    r = await push(
        client, host["agentToken"], retimed(example("observation-1.3.0-error-heartbeat.json"))
    )
    assert r.status_code == 202, r.text
    shown = await _host(client, tenant, host["hostId"])
    assert shown["freshness"] == "error"
    assert shown["errors"] == ["nvml_init_failed"]
    assert shown["driverVersion"] == "unknown"
    assert shown["gpus"] == []
    assert shown["lastSeenAt"] is not None


async def test_two_hosts_with_the_same_gpu_uuids(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    first = await enroll(client, tenant, "a")
    second = await enroll(client, tenant, "b")
    for host in (first, second):
        r = await push(client, host["agentToken"], retimed(example("observation-1.8.0-fake.json")))
        assert r.status_code == 202
    listed = (
        await client.get("/api/v1/workspaces/acme/hosts", headers=tenant.auth("member"))
    ).json()
    assert len(listed["hosts"]) == 2
    for h in listed["hosts"]:
        assert [g["uuid"] for g in h["gpus"]] == ["GPU-0", "GPU-1", "GPU-2"]
    assert await scalar(app, "SELECT count(*) FROM gpus") == 6
    assert await scalar(app, "SELECT count(DISTINCT gpu_id) FROM gpu_samples") == 6


async def test_payload_host_id_is_never_trusted(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    first = await enroll(client, tenant, "a")
    second = await enroll(client, tenant, "b")
    body = retimed(example("observation-1.8.0-fake.json"))
    body["host"]["hostId"] = second["hostId"]
    assert (await push(client, first["agentToken"], body)).status_code == 202
    assert (await _host(client, tenant, first["hostId"]))["freshness"] == "ok"
    assert (await _host(client, tenant, second["hostId"]))["freshness"] == "never"


async def test_repeated_observation_is_stored_once(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    body = retimed(example("observation-1.8.0-fake.json"))
    first = await push(client, host["agentToken"], body)
    second = await push(client, host["agentToken"], body)
    assert first.status_code == second.status_code == 202
    assert first.json()["duplicate"] is False
    assert second.json()["duplicate"] is True
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 1
    assert await scalar(app, "SELECT count(*) FROM gpu_samples") == 3
    assert await scalar(app, "SELECT sum(sample_count) FROM gpu_hour_rollups") == 3


async def test_older_observation_is_stored_but_not_shown_as_newest(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    newest = retimed(example("observation-1.8.0-fake.json"), minutes_ago(1))
    older = retimed(example("observation-1.3.0-error-heartbeat.json"), minutes_ago(2))
    assert (await push(client, host["agentToken"], newest)).status_code == 202
    assert (await push(client, host["agentToken"], older)).status_code == 202
    shown = await _host(client, tenant, host["hostId"])
    assert shown["freshness"] == "ok"
    assert shown["lastSeenAt"] == newest["observedAt"]
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 2


async def test_stale_and_never(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    assert (await _host(client, tenant, host["hostId"]))["freshness"] == "never"
    body = retimed(example("observation-1.8.0-fake.json"), minutes_ago(2))
    assert (await push(client, host["agentToken"], body)).status_code == 202
    assert (await _host(client, tenant, host["hostId"]))["freshness"] == "stale"  # 120 s > 90 s
    patch = await client.patch(
        "/api/v1/workspaces/acme/settings", json={"staleAfterSeconds": 600}, headers=tenant.auth()
    )
    assert patch.status_code == 200, patch.text
    assert (await _host(client, tenant, host["hostId"]))["freshness"] == "ok"


async def test_finance_sees_inventory_without_processes(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    await push(client, host["agentToken"], retimed(example("observation-1.8.0-fake.json")))
    shown = await _host(client, tenant, host["hostId"], role="finance")
    assert [g["uuid"] for g in shown["gpus"]] == ["GPU-0", "GPU-1", "GPU-2"]
    assert all(g["processes"] is None for g in shown["gpus"])
    assert "alice" not in str(shown)


async def test_revoked_host_gets_401_and_keeps_history(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    body = retimed(example("observation-1.8.0-fake.json"), minutes_ago(1))
    assert (await push(client, host["agentToken"], body)).status_code == 202
    member = await client.post(
        f"/api/v1/workspaces/acme/hosts/{host['hostId']}/revoke", headers=tenant.auth("member")
    )
    assert member.status_code == 403
    r = await client.post(
        f"/api/v1/workspaces/acme/hosts/{host['hostId']}/revoke", headers=tenant.auth()
    )
    assert r.status_code == 200
    later = copy.deepcopy(body)
    later["observedAt"] = (minutes_ago(1) + timedelta(seconds=30)).isoformat()
    refused = await push(client, host["agentToken"], later)
    assert refused.status_code == 401
    assert isinstance(refused.json()["detail"], str)
    assert host["agentToken"] not in refused.text
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 1
    shown = await _host(client, tenant, host["hostId"])
    assert shown["revokedAt"] is not None


# Characters that mean something in COPY lines or array literals, and non-ASCII text.
AWKWARD = ["tab\there", "new\nline\r", "back\\slash", 'say "hi"', "{a,b}", "NULL", "naïve 名前"]


async def test_awkward_strings_are_stored_and_shown_exactly(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    body = retimed(example("observation-1.8.0-fake.json"), minutes_ago(2))
    processes = body["gpus"][0]["processes"]
    body["gpus"][0]["processes"] = [
        dict(processes[0], pid=100 + i, linuxUser=text, name=text[::-1])
        for i, text in enumerate(AWKWARD)
    ]
    body["host"]["agentVersion"] = "1.8.0\tdev\\x"
    body["collectionStatus"], body["errors"] = "partial", ['odd "code"', "a,b", "\\"]
    assert (await push(client, host["agentToken"], body)).status_code == 202
    # A second push closes the interval, so the rollups bill the odd user names too.
    later = retimed(body, minutes_ago(1))
    assert (await push(client, host["agentToken"], later)).status_code == 202

    shown = await _host(client, tenant, host["hostId"])
    assert [(p["linuxUser"], p["name"]) for p in shown["gpus"][0]["processes"]] == [
        (text, text[::-1]) for text in AWKWARD
    ]
    assert shown["agentVersion"] == "1.8.0\tdev\\x"
    assert shown["errors"] == ['odd "code"', "a,b", "\\"]
    billed = await scalar(app, "SELECT array_agg(DISTINCT linux_user) FROM user_hour_rollups")
    assert set(AWKWARD) <= set(billed)
    errors = await scalar(app, "SELECT errors FROM host_observations ORDER BY observed_at LIMIT 1")
    assert errors == ['odd "code"', "a,b", "\\"]
