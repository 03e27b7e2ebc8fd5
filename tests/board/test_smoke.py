from __future__ import annotations

from tests.board.builders import enroll, example, make_tenant, push, retimed


async def test_enroll_push_list(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    r = await push(client, host["agentToken"], retimed(example("observation-1.8.0-fake.json")))
    assert r.status_code == 202, r.text
    hosts = await client.get("/api/v1/workspaces/acme/hosts", headers=tenant.auth("member"))
    assert hosts.status_code == 200, hosts.text
    [h] = hosts.json()["hosts"]
    assert h["freshness"] == "ok"
    assert [g["usageState"] for g in h["gpus"]] == ["active", "idle_held", "idle"]
