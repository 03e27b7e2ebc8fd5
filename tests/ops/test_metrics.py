"""/metrics: counters move with pushes and rejects, report latency by name, hosts by
freshness from the database, who may scrape, and no tenant in any label."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from board.metrics.http import report_name
from tests.board.answers import refused
from tests.board.builders import enroll, example, make_tenant, push, retimed
from tests.ops.fleet import sample_value

ACCEPTED = "gua_board_observations_accepted_total"
REJECTED = "gua_board_observations_rejected_total"


async def scrape(client: httpx.AsyncClient) -> str:
    r = await client.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return r.text


def rejected(text: str, reason: str) -> float:
    return sample_value(text, REJECTED, f'reason="{reason}"')


async def test_counters_move_with_pushes_and_rejects(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, "gpu-1")
    token = host["agentToken"]
    before = await scrape(client)

    assert (
        await push(client, token, retimed(example("observation-1.8.0-fake.json")))
    ).status_code == 202
    # Each refusal the ingest tells apart, once.
    bad_token = await client.post(
        "/agent/v1/observations", json={}, headers={"Authorization": "Bearer gua_agent_nope"}
    )
    assert bad_token.status_code == 401
    not_json = await client.post(
        "/agent/v1/observations",
        content=b"{",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert not_json.status_code == 400
    wrong_type = await client.post(
        "/agent/v1/observations",
        content=b"x",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "text/plain"},
    )
    assert wrong_type.status_code == 415
    future = retimed(example("observation-1.8.0-fake.json"), datetime.now(UTC) + timedelta(hours=2))
    assert (await push(client, token, future)).status_code == 422
    assert (await push(client, token, {"schemaVersion": 1})).status_code == 422

    after = await scrape(client)
    assert sample_value(after, ACCEPTED) - sample_value(before, ACCEPTED) == 1
    for reason in (
        "unauthorized",
        "invalid_json",
        "unsupported_media_type",
        "observed_at_in_future",
        "invalid_payload",
    ):
        assert rejected(after, reason) - rejected(before, reason) == 1, reason
    for name in ("gua_board_ingest_batch_size_count", "gua_board_ingest_commit_seconds_count"):
        assert sample_value(after, name) - sample_value(before, name) >= 1, name


async def test_report_latency_by_report_name(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "acme")
    metric = "gua_board_report_seconds_count"
    before = await scrape(client)
    span = {"from": "2026-01-01", "to": "2026-01-02"}
    r = await client.get(
        "/api/v1/workspaces/acme/reports/utilization", params=span, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    r = await client.get(
        "/api/v1/workspaces/acme/reports/usage", params=span, headers=tenant.auth("finance")
    )
    assert r.status_code == 200, r.text
    after = await scrape(client)
    for name in ("utilization", "usage"):
        label = f'report="{name}"'
        assert sample_value(after, metric, label) - sample_value(before, metric, label) == 1
    # The workspace's slug is in the path, never in a label.
    assert "acme" not in after


async def test_a_refused_report_is_not_timed_under_another_name(
    app: Any, client: httpx.AsyncClient
) -> None:
    await make_tenant(app, "acme")
    r = await client.get("/api/v1/workspaces/acme/reports/nonesuch")
    assert r.status_code in (401, 404)
    assert 'report="nonesuch"' not in await scrape(client)


def test_report_name_reads_the_route_template() -> None:
    class Route:
        path = "/api/v1/workspaces/{slug}/reports/usage"

    assert report_name({"route": Route()}) == "usage"
    assert report_name({}) is None


async def test_hosts_by_freshness_come_from_the_database(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "acme")
    fresh = await enroll(client, tenant, "fresh")
    await enroll(client, tenant, "never-pushed")
    stale = await enroll(client, tenant, "stale")
    body = example("observation-1.8.0-fake.json")
    assert (await push(client, fresh["agentToken"], retimed(body))).status_code == 202
    old = datetime.now(UTC) - timedelta(hours=3)
    assert (await push(client, stale["agentToken"], retimed(body, old))).status_code == 202
    text = await scrape(client)
    counts = {
        state: sample_value(text, "gua_board_hosts", f'freshness="{state}"')
        for state in ("ok", "partial", "error", "stale", "never")
    }
    assert counts["never"] == 1
    assert counts["stale"] == 1
    assert counts["ok"] + counts["partial"] + counts["error"] == 1


async def test_only_private_addresses_scrape_without_a_token(app: Any) -> None:
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as c:
        r = await c.get("/metrics")
    assert r.status_code == 403
    assert isinstance(r.json()["detail"], str)
    assert "gua_board" not in r.text


async def test_a_metrics_token_is_required_when_set(app: Any) -> None:
    token = "m" * 8 + "3tr1cs-t0ken-for-tests"
    runtime = app.state.runtime
    # The route reads the process's settings (SettingsDep): the same app, with a token.
    runtime.settings = runtime.settings.model_copy(update={"metrics_token": token})
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as c:
        missing = await c.get("/metrics")
        wrong = await c.get("/metrics", headers={"Authorization": "Bearer " + "x" * 30})
        right = await c.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert isinstance(missing.json()["detail"], str)
    assert token not in missing.text + wrong.text
    assert right.status_code == 200
    assert ACCEPTED in right.text


async def test_metrics_can_be_turned_off(app: Any, client: httpx.AsyncClient) -> None:
    runtime = app.state.runtime
    runtime.settings = runtime.settings.model_copy(update={"metrics_enabled": False})
    r = await client.get("/metrics")
    assert r.status_code == 404
    assert "gua_board" not in r.text


async def test_metrics_hold_no_tenant_text_and_bounded_labels(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "metricsws")
    host = await enroll(client, tenant, "metrics-secret-host")
    auth = {"Authorization": f"Bearer {host['agentToken']}"}
    for i in range(30):
        await client.post(
            "/agent/v1/observations",
            json={"observedAt": f"bad-{i}", "hostname": f'evil"\n{i}'},
            headers=auth,
        )
        await client.post(f"/api/v1/workspaces/{tenant.slug}/reports/x{i}", headers=tenant.auth())
    r = await client.get("/metrics")
    assert r.status_code == 200, r.text[:300]
    for text in (tenant.slug, "metrics-secret-host", "evil", "@", "bad-"):
        assert text not in r.text, text
    series = [line for line in r.text.splitlines() if line and not line.startswith("#")]
    reasons = {line for line in series if "observations_rejected" in line}
    assert len(reasons) < 30, reasons
    # From a public address, without the token: no metrics.
    public = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=("203.0.113.9", 4000)),
        base_url="http://board.test",
    )
    async with public:
        refused(await public.get("/metrics"), 403)
