"""Usage and utilization reports on hand-computed fixtures pushed through the agent API.

The scenario (maxSampleGapSeconds = 3600 so the arithmetic stays in half hours), D is a
UTC midnight three days ago, GPU-0 and GPU-1 on one host:

  o1 D-1 22:00  GPU-0 alice+bob active 80 %     GPU-1 only a graphics process (gdm)
  o2 D-1 23:30  GPU-0 alice+bob idle_held 1 %   GPU-1 graphics   (o1→o2 is 1.5 h: a gap)
  o3 D   00:30  GPU-0 alice active 90 %         GPU-1 graphics   (o2→o3 crosses the day)
  o4 D   01:00  agent 1.3.0, no usageState: GPU-0 alice at 3 % → idle_held; GPU-1 idle
  o5 D   01:30  closes o4's interval; itself not billed yet

  alice: 0.5 (o2→o3, half of 1 h) + 0.5 active (o3→o4) + 0.5 idle_held (o4→o5) = 1.5 h
  bob:   0.5 idle_held (o2→o3)                                                = 0.5 h
  GPU-1: 2 h covered, all idle, nobody billed (graphics never owns a GPU).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.board.builders import Tenant, enroll, push
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
    report,
    set_max_gap,
)

H = timedelta(hours=1)


def _day(offset: int = 0) -> str:
    return (days_ago_midnight(3) + timedelta(days=offset)).date().isoformat()


async def _scenario(app: Any, client: Any) -> tuple[Tenant, dict[str, Any]]:
    tenant = await quick_tenant(app)
    await set_max_gap(client, tenant, 3600)
    host = await enroll(client, tenant, "node-a")
    d = days_ago_midnight(3)
    graphics = [proc("gdm", "graphics")]
    bodies = [
        observation(
            d - 2 * H,
            [
                gpu(0, util=80, state="active", procs=[proc("alice"), proc("bob")], used=5000),
                gpu(1, state="idle", procs=graphics, used=100),
            ],
        ),
        observation(
            d - H / 2,
            [
                gpu(0, util=1, state="idle_held", procs=[proc("alice"), proc("bob")], used=4000),
                gpu(1, state="idle", procs=graphics, used=100),
            ],
        ),
        observation(
            d + H / 2,
            [
                gpu(0, util=90, state="active", procs=[proc("alice")], used=8000),
                gpu(1, state="idle", procs=graphics, used=100),
            ],
        ),
        # Agent 1.3.0: no usageState and no process type (counts as compute).
        observation(
            d + H,
            [gpu(0, util=3, procs=[proc("alice", None)], used=2000), gpu(1, used=100)],
            agent="1.3.0",
        ),
        observation(d + 1.5 * H, [gpu(0, util=50), gpu(1)], agent="1.3.0"),
    ]
    for body in bodies:
        r = await push(client, host["agentToken"], body)
        assert r.status_code == 202, r.text
    return tenant, host


def _rows_by(rows: list[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(r[k] for k in keys): r for r in rows}


async def test_usage_by_user_bills_shared_gpu_half_each(app, client) -> None:
    tenant, _ = await _scenario(app, client)
    body = await report(client, tenant, "usage", **{"from": _day(-1), "to": _day(1)})
    assert body["groupBy"] == "user"
    assert body["tz"] == "UTC"
    rows = _rows_by(body["rows"], "user")
    assert set(rows) == {("alice",), ("bob",)}  # gdm (graphics) is never billed
    alice, bob = rows[("alice",)], rows[("bob",)]
    assert alice["heldGpuHours"] == 1.5
    assert alice["activeGpuHours"] == 0.5
    assert alice["idleHeldGpuHours"] == 1.0
    assert alice["idleHeldShare"] == 0.666667
    assert (bob["heldGpuHours"], bob["activeGpuHours"], bob["idleHeldGpuHours"]) == (0.5, 0, 0.5)
    assert bob["idleHeldShare"] == 1.0
    assert body["totals"] == {
        "heldGpuHours": 2.0,
        "activeGpuHours": 0.5,
        "idleHeldGpuHours": 1.5,
        "idleHeldShare": 0.75,
        # No prices set: no cost (docs/money.md).
        "cost": None,
        "currency": None,
        # Every GPU drew 100 W: the users' shares of 2 held hours, 0.5 h of them active.
        "energyKWh": 0.2,
        "activeEnergyKWh": 0.05,
        "idleHeldEnergyKWh": 0.15,
        "energyCoveredHours": 2.0,
        # No electricity price, no carbon intensity: null, never 0.
        "energyCost": None,
        "co2eKg": None,
    }
    coverage = body["coverage"]
    assert coverage["coveredGpuHours"] == 4.0  # 2 h on each GPU; the 1.5 h gap is not covered
    d = days_ago_midnight(3)
    assert coverage["earliestDataAt"] == (d - H).isoformat()
    assert coverage["latestDataAt"] == (d + 2 * H).isoformat()


async def test_usage_by_user_and_day_splits_the_interval_at_midnight(app, client) -> None:
    tenant, _ = await _scenario(app, client)
    body = await report(
        client, tenant, "usage", **{"from": _day(-1), "to": _day(1), "groupBy": "user,day"}
    )
    rows = _rows_by(body["rows"], "user", "day")
    assert [tuple(r[k] for k in ("user", "day")) for r in body["rows"]] == [
        ("alice", _day(-1)),
        ("alice", _day(0)),
        ("bob", _day(-1)),
        ("bob", _day(0)),
    ]
    assert rows[("alice", _day(-1))]["heldGpuHours"] == 0.25
    assert rows[("alice", _day(0))]["heldGpuHours"] == 1.25
    assert rows[("alice", _day(0))]["activeGpuHours"] == 0.5
    assert rows[("bob", _day(-1))]["idleHeldGpuHours"] == 0.25
    assert rows[("bob", _day(0))]["idleHeldGpuHours"] == 0.25


async def test_window_starting_mid_series_keeps_only_its_part(app, client) -> None:
    tenant, _ = await _scenario(app, client)
    d = days_ago_midnight(3)
    body = await report(
        client, tenant, "usage", **{"from": d.isoformat(), "to": (d + 2 * H).isoformat()}
    )
    rows = _rows_by(body["rows"], "user")
    assert rows[("alice",)]["heldGpuHours"] == 1.25
    assert rows[("bob",)]["heldGpuHours"] == 0.25
    assert body["coverage"]["coveredGpuHours"] == 3.0
    assert body["from"] == d.isoformat()


async def test_usage_by_gpu_shows_unheld_gpu_with_its_covered_time(app, client) -> None:
    tenant, host = await _scenario(app, client)
    body = await report(
        client, tenant, "usage", **{"from": _day(-1), "to": _day(1), "groupBy": "gpu"}
    )
    rows = _rows_by(body["rows"], "gpuIndex")
    assert rows[(0,)]["heldGpuHours"] == 2.0
    assert rows[(0,)]["coveredGpuHours"] == 2.0
    assert rows[(1,)]["heldGpuHours"] == 0
    assert rows[(1,)]["idleHeldShare"] is None
    assert rows[(1,)]["coveredGpuHours"] == 2.0
    assert rows[(0,)]["hostId"] == host["hostId"]
    assert rows[(0,)]["displayName"] == host["displayName"]
    assert rows[(0,)]["gpuUuid"] == "GPU-0"

    by_host = await report(
        client, tenant, "usage", **{"from": _day(-1), "to": _day(1), "groupBy": "host"}
    )
    [row] = by_host["rows"]
    assert (row["hostId"], row["heldGpuHours"], row["coveredGpuHours"]) == (
        host["hostId"],
        2.0,
        4.0,
    )


async def test_utilization_hourly_per_gpu(app, client) -> None:
    tenant, _ = await _scenario(app, client)
    d = days_ago_midnight(3)
    body = await report(
        client,
        tenant,
        "utilization",
        **{"from": _day(-1), "to": _day(1), "groupBy": "gpu", "bucket": "hour"},
    )
    rows = _rows_by(body["rows"], "gpuIndex", "bucketStart")
    first = rows[(0, (d - H).isoformat())]  # 23:30-24:00 idle_held at 1 %
    assert (first["coveredHours"], first["idleHeldHours"], first["avgUtilPct"]) == (0.5, 0.5, 1)
    assert first["avgMemoryUsedPct"] == 40.0
    midnight = rows[(0, d.isoformat())]  # half idle_held at 1 %, half active at 90 %
    assert midnight["coveredHours"] == 1.0
    assert (midnight["activeHours"], midnight["idleHeldHours"]) == (0.5, 0.5)
    assert midnight["avgUtilPct"] == 45.5
    assert midnight["avgMemoryUsedPct"] == 60.0
    one = rows[(0, (d + H).isoformat())]  # derived idle_held (3 %, compute process)
    assert (one["coveredHours"], one["idleHeldHours"], one["avgUtilPct"]) == (0.5, 0.5, 3)
    gpu1 = [r for r in body["rows"] if r["gpuIndex"] == 1]
    assert sum(r["idleHours"] for r in gpu1) == 2.0
    assert all(r["activeHours"] == 0 and r["idleHeldHours"] == 0 for r in gpu1)


async def test_utilization_daily_per_host(app, client) -> None:
    tenant, _ = await _scenario(app, client)
    body = await report(client, tenant, "utilization", **{"from": _day(-1), "to": _day(1)})
    assert (body["groupBy"], body["bucket"]) == ("host", "day")
    starts = [(r["bucketStart"], r["coveredHours"], r["idleHours"]) for r in body["rows"]]
    d = days_ago_midnight(3)
    assert starts == [((d - 24 * H).isoformat(), 1.0, 0.5), (d.isoformat(), 3.0, 1.5)]


async def test_gap_longer_than_max_sample_gap_is_not_billed(app, client) -> None:
    tenant = await quick_tenant(app)  # default maxSampleGapSeconds: 120
    host = await enroll(client, tenant)
    d = days_ago_midnight(2)
    held = [gpu(0, util=90, state="active", procs=[proc("carol")])]
    for at in (d, d + timedelta(seconds=120), d + timedelta(seconds=241)):
        assert (await push(client, host["agentToken"], observation(at, held))).status_code == 202
    body = await report(client, tenant, "usage", **{"from": d.date().isoformat(), "to": _day(2)})
    [row] = body["rows"]
    # 120 s counts (exactly the limit); the 121 s interval after it is a gap.
    assert row["heldGpuHours"] == round(120 / 3600, 6)
    assert body["coverage"]["coveredGpuHours"] == round(120 / 3600, 6)


async def test_csv_has_the_same_rows(app, client) -> None:
    tenant, _ = await _scenario(app, client)
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/usage",
        params={"from": _day(-1), "to": _day(1), "groupBy": "user,day", "format": "csv"},
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    lines = r.text.splitlines()
    assert lines[0] == (
        "user,day,heldGpuHours,activeGpuHours,idleHeldGpuHours,idleHeldShare,cost,currency,"
        "energyKWh,activeEnergyKWh,idleHeldEnergyKWh,energyCoveredHours,energyCost,co2eKg,"
        "outsideJobGpuHours"
    )
    assert lines[1] == (
        f"alice,{_day(-1)},0.250000,0.000000,0.250000,1.000000,,,"
        "0.025000,0.000000,0.025000,0.250000,,,0.000000"
    )
    assert len(lines) == 5

    util = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/utilization",
        params={"from": _day(-1), "to": _day(1), "groupBy": "gpu", "format": "csv"},
        headers=tenant.auth("member"),
    )
    header = util.text.splitlines()[0].split(",")
    assert header[:5] == ["hostId", "displayName", "gpuUuid", "gpuIndex", "gpuName"]
    assert header[5:] == [
        "bucketStart",
        "coveredHours",
        "activeHours",
        "idleHeldHours",
        "idleHours",
        "avgUtilPct",
        "avgMemoryUsedPct",
        "energyKWh",
        "idleEnergyKWh",
        "avgPowerW",
        "energyCoveredHours",
    ]
    # The JSON objects carry the same fields in the same order, with the same values.
    body = await report(
        client,
        tenant,
        "utilization",
        **{"from": _day(-1), "to": _day(1), "groupBy": "gpu"},
    )
    assert [list(row) for row in body["rows"]] == [header] * len(body["rows"])
    first = util.text.splitlines()[1].split(",")
    assert first[:6] == [str(v) for v in list(body["rows"][0].values())[:6]]
    assert [float(v) for v in first[6:]] == list(body["rows"][0].values())[6:]


async def test_empty_window_answers_empty_rows(app, client) -> None:
    tenant = await quick_tenant(app)
    body = await report(client, tenant, "usage", **{"from": "2026-01-01", "to": "2026-01-02"})
    assert body["rows"] == []
    assert body["totals"]["heldGpuHours"] == 0
    assert body["totals"]["idleHeldShare"] is None
    assert body["coverage"] == {"earliestDataAt": None, "latestDataAt": None, "coveredGpuHours": 0}


@pytest.mark.parametrize("role", ["admin", "member", "finance"])
async def test_every_role_may_read_reports(app, client, role) -> None:
    tenant = await quick_tenant(app)
    for kind in ("usage", "utilization"):
        await report(client, tenant, kind, role=role, **{"from": "2026-01-01", "to": "2026-01-02"})


async def test_other_workspace_is_404_and_no_token_is_401(app, client) -> None:
    ours, theirs = await quick_tenant(app), await quick_tenant(app)
    for kind in ("usage", "utilization"):
        url = f"/api/v1/workspaces/{theirs.slug}/reports/{kind}"
        window = {"from": "2026-01-01", "to": "2026-01-02"}
        r = await client.get(url, params=window, headers=ours.auth("finance"))
        assert r.status_code == 404
        assert isinstance(r.json()["detail"], str)
        assert (await client.get(url, params=window)).status_code == 401
