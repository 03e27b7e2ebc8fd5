"""Fleet health's notices: a GPU that vanishes and comes back (told once, resolved, and its
absent time never billed), a host going stale while a GPU is missing, a hot GPU with
hysteresis, and a host inside a maintenance window (across a DST change) told nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx

from tests.board.builders import Tenant, enroll, make_tenant, push
from tests.board.db import rows
from tests.board.test_reports_builders import gpu, observation, proc
from tests.notices.helpers import MINUTE, S, events, notices_of, start_of_run

US = 1_000_000


def card(index: int, temperature: int = 40) -> dict[str, Any]:
    body = gpu(index, util=90, state="active", procs=[proc("alice")])
    body["temperatureC"] = temperature
    return body


async def send(client: httpx.AsyncClient, agent: str, when: datetime, *cards: Any) -> None:
    r = await push(client, agent, observation(when, list(cards)))
    assert r.status_code == 202, r.text


async def host(client: httpx.AsyncClient, tenant: Tenant, name: str) -> str:
    return str((await enroll(client, tenant, name))["agentToken"])


async def covered_seconds(app: Any, uuid: str) -> tuple[float, float]:
    """(covered, held) seconds of a GPU in the rollups, all hours together."""
    found = await rows(
        app,
        "SELECT coalesce(sum(r.covered_us), 0), "
        "  (SELECT coalesce(sum(u.held_us), 0) FROM user_hour_rollups u WHERE u.gpu_id = g.id) "
        "FROM gpus g LEFT JOIN gpu_hour_rollups r ON r.gpu_id = g.id "
        "WHERE g.uuid = %s GROUP BY g.id",
        uuid,
    )
    ((covered, held),) = found
    return covered / US, held / US


async def test_a_gpu_vanishes_and_comes_back(app, client) -> None:
    acme = await make_tenant(app, "acme")
    agent = await host(client, acme, "node-a")
    detect = notices_of(app).detect_once
    t0 = start_of_run()
    opened: list[str] = []
    closed: list[str] = []
    # GPU-1 is listed at t0..t0+4, absent t0+5..t0+11, back t0+12..t0+15.
    for minute in range(16):
        when = t0 + minute * MINUTE
        listed = [card(0)] if 5 <= minute <= 11 else [card(0), card(1)]
        await send(client, agent, when, *listed)
        result = (await detect(when + 10 * S))["acme"]
        opened += [f"{minute}:{k}" for k in result.opened]
        closed += [f"{minute}:{k}" for k in result.closed]
    # Due 2 minutes after the first observation without it; the end once it stayed back
    # for 2 minutes (the passes' hysteresis).
    assert opened == ["7:gpu.missing"]
    assert closed == ["14:gpu.missing.resolved"]
    (told,) = await events(app, "gpu.missing")
    data = told[2]["data"]
    assert data["gpu"] == {"uuid": "GPU-1", "index": 1, "name": "NVIDIA A100"}
    assert data["host"]["displayName"] == "node-a"
    assert datetime.fromisoformat(data["since"]) == t0 + 5 * MINUTE
    assert datetime.fromisoformat(data["lastSeenAt"]) == t0 + 4 * MINUTE
    (ended,) = await events(app, "gpu.missing.resolved")
    assert ended[2]["data"]["endedAt"]

    # Never billed: GPU-1 is credited the intervals its observations opened (t0..t0+5 and
    # t0+12..t0+15), nothing of the 7 minutes it was absent; GPU-0 all 15 minutes.
    assert await covered_seconds(app, "GPU-1") == (8 * 60, 8 * 60)
    assert await covered_seconds(app, "GPU-0") == (15 * 60, 15 * 60)


async def test_a_host_going_stale_while_a_gpu_is_missing(app, client) -> None:
    """A stale host's GPUs are neither missing nor back: the open gpu.missing episode waits
    (host.stale is told meanwhile) and ends only when the host reports the GPU again; a
    host that falls silent before the 2 minutes never gets gpu.missing at all."""
    acme = await make_tenant(app, "acme")
    agent = await host(client, acme, "node-a")
    brief = await host(client, acme, "node-b")
    detect = notices_of(app).detect_once
    t0 = start_of_run()
    opened: list[str] = []
    for minute in range(9):
        when = t0 + minute * MINUTE
        await send(client, agent, when, *([card(0)] if minute >= 5 else [card(0), card(1)]))
        # node-b loses GPU-1 at t0+5 too, and falls silent right after.
        if minute <= 5:
            await send(client, brief, when, *([card(0)] if minute == 5 else [card(0), card(1)]))
        opened += [f"{minute}:{k}" for k in (await detect(when + 10 * S))["acme"].opened]
    # node-b is stale 90 s after its last push, before its GPU-1 was gone 2 minutes.
    assert sorted(opened) == ["7:gpu.missing", "7:host.stale"]

    silent = t0 + 20 * MINUTE
    result = (await detect(silent))["acme"]
    assert result.opened == ["host.stale"]
    assert result.closed == []
    assert (await detect(silent + 5 * MINUTE))["acme"].closed == []

    # node-a reports again, still without GPU-1: the episode goes on, host.stale ends.
    back = t0 + 30 * MINUTE
    for minute in range(3):
        await send(client, agent, back + minute * MINUTE, card(0))
        result = (await detect(back + minute * MINUTE + 10 * S))["acme"]
        assert "gpu.missing.resolved" not in result.closed
        assert "gpu.missing" not in result.opened
    assert result.closed == ["host.stale.resolved"]
    # Then with GPU-1: resolved after the hysteresis.
    for minute in range(3, 6):
        await send(client, agent, back + minute * MINUTE, card(0), card(1))
        result = (await detect(back + minute * MINUTE + 10 * S))["acme"]
    assert result.closed == ["gpu.missing.resolved"]
    told = [e[2]["data"]["host"]["displayName"] for e in await events(app, "gpu.missing")]
    assert told == ["node-a"]  # never node-b: it went stale before the 2 minutes


async def test_hot_with_hysteresis(app, client) -> None:
    acme = await make_tenant(app, "acme")
    agent = await host(client, acme, "node-a")
    detect = notices_of(app).detect_once
    t0 = start_of_run()

    async def minute(n: int, temperature: int) -> Any:
        when = t0 + n * MINUTE
        await send(client, agent, when, card(0, temperature), card(1))
        return (await detect(when + 10 * S))["acme"]

    # Hot 4 minutes, one cool reading, hot again: the run starts over, nothing is told.
    for n, temperature in enumerate([90, 90, 90, 90, 70, 90, 90, 90, 90]):
        assert (await minute(n, temperature)).opened == []
    # Hot from t0+5: due at 5 minutes.
    assert (await minute(9, 91)).opened == []
    assert (await minute(10, 92)).opened == ["gpu.hot"]
    # Within 3 °C below the threshold the episode holds; below that, it ends only once it
    # stayed cool for 2 minutes at every pass: a cool minute, hot again, then cool for good.
    for n, temperature in [(11, 83), (12, 82), (13, 80), (14, 86), (15, 70), (16, 70)]:
        result = await minute(n, temperature)
        assert result.opened == result.closed == [], n
    assert (await minute(17, 70)).closed == ["gpu.hot.resolved"]
    (told,) = await events(app, "gpu.hot")
    data = told[2]["data"]
    assert data["gpu"]["uuid"] == "GPU-0"
    assert data["temperatureC"] == 92
    assert data["hotTemperatureC"] == 85
    assert datetime.fromisoformat(data["since"]) == t0 + 5 * MINUTE

    # The workspace's own threshold: at 60 °C, GPU-1's 40 °C is still fine, GPU-0's 70 hot.
    r = await client.patch(
        "/api/v1/workspaces/acme/settings", json={"hotTemperatureC": 60}, headers=acme.auth()
    )
    assert r.status_code == 200, r.text
    assert r.json()["hotTemperatureC"] == 60
    for n in range(18, 24):
        result = await minute(n, 70)
    assert [e[2]["data"]["gpu"]["uuid"] for e in await events(app, "gpu.hot")] == [
        "GPU-0",
        "GPU-0",
    ]


async def test_no_notice_inside_a_maintenance_window_across_dst(app, client) -> None:
    """A daily window 01:00-03:00 in Europe/Berlin, made before the spring DST change,
    covers 01:00-03:00 local after it too (23:00-01:00 UTC, not 00:00-02:00): a stale host
    is told nothing inside it, and is told once the window is over."""
    acme = await make_tenant(app, "acme")
    r = await client.patch(
        "/api/v1/workspaces/acme/settings", json={"timezone": "Europe/Berlin"}, headers=acme.auth()
    )
    assert r.status_code == 200, r.text
    enrolled = await enroll(client, acme, "node-a")
    await send(client, enrolled["agentToken"], datetime.now(UTC) - MINUTE, card(0))
    made = await client.post(
        f"/api/v1/workspaces/acme/hosts/{enrolled['hostId']}/maintenance",
        json={
            "start": "2027-03-27T01:00:00+01:00",
            "end": "2027-03-27T03:00:00+01:00",
            "recurrence": "daily",
            "note": "firmware",
        },
        headers=acme.auth(),
    )
    assert made.status_code == 201, made.text
    assert made.json()["zone"] == "Europe/Berlin"
    detect = notices_of(app).detect_once
    # 01:15 CEST on the 29th: inside the window (a fixed 24 h repeat would have missed it).
    inside = datetime(2027, 3, 28, 23, 15, tzinfo=UTC)
    result = (await detect(inside))["acme"]
    assert result.opened == []
    # What the digest lists: this night's window and the next (within 24 hours).
    assert [(w["start"], w["end"], w["note"]) for w in result.seen.maintenance] == [
        ("2027-03-28T23:00:00+00:00", "2027-03-29T01:00:00+00:00", "firmware"),
        ("2027-03-29T23:00:00+00:00", "2027-03-30T01:00:00+00:00", "firmware"),
    ]
    # 03:30 CEST: the window is over (a fixed 24 h repeat would still hold it).
    assert (await detect(datetime(2027, 3, 29, 1, 30, tzinfo=UTC)))["acme"].opened == ["host.stale"]
    # Inside the next night's window the open episode neither ends nor is told again
    # (without the wait, two passes 15 minutes apart would have ended it).
    for at in (
        datetime(2027, 3, 29, 23, 15, tzinfo=UTC),
        datetime(2027, 3, 29, 23, 30, tzinfo=UTC),
    ):
        result = (await detect(at))["acme"]
        assert result.opened == result.closed == []
    assert [e[1] for e in await events(app)] == ["host.stale"]


def test_the_digest_lists_maintenance_windows() -> None:
    from board.notices.messages import text_body

    data = {
        "workspace": {"slug": "acme", "name": "Acme"},
        "day": "2027-03-28",
        "idleHeldGpuHours": 0,
        "idleHeldByUser": [],
        "reservedIdleGpuHours": 0,
        "reservedIdleByMember": [],
        "unhealthyHosts": [],
        "longestIdleHeld": [],
        "maintenance": [
            {
                "host": {"hostId": "h", "displayName": "node-a", "hostname": "node-a"},
                "start": "2027-03-28T23:00:00+00:00",
                "end": "2027-03-29T01:00:00+00:00",
                "recurrence": "daily",
                "note": "firmware",
            }
        ],
    }
    text = text_body({"type": "digest.daily", "data": data}, None)
    assert (
        "  node-a: 2027-03-28T23:00:00+00:00 to 2027-03-29T01:00:00+00:00 (daily): firmware" in text
    )
