"""A busy GPU is never shown as free, and held time nobody is named for is billed to `unknown`.

The scenario (maxSampleGapSeconds = 7200, so o1→o3 is one interval until o2 arrives),
T is 10:00 UTC three days ago, one host with four GPUs:

  o1 T        partial (process_list_unavailable), no usageState anywhere:
              GPU-0 80 %, no process         → active (utilization alone), `unknown`
              GPU-1  0 %, no process         → idle, nobody
              GPU-2 50 %, only gdm (graphics) → derived normally: idle, nobody
              GPU-3  3 %, alice (compute)     → idle_held, alice
  o2 T+1 h    ok, usageState sent:
              GPU-0 idle_held, no process    → `unknown`, idle-held
              GPU-1 idle, GPU-2 idle (gdm), GPU-3 active alice
  o3 T+1.5 h  same as o2; closes o2's interval, itself not billed yet

  unknown: 1.0 active (o1→o2) + 0.5 idle-held (o2→o3) = 1.5 h
  alice:   1.0 idle-held (o1→o2) + 0.5 active (o2→o3) = 1.5 h
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from board.db.urls import libpq_url
from board.ingest.normalize import decode_tick, encode_tick
from board.rollups.crediting import GpuTick, RollupDelta, Tick, billed_users, derive_state
from board.rollups.rebuild import rebuild
from tests.board.builders import enroll, make_tenant, push
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
    report,
    rollup_rows,
    set_max_gap,
    workspace_id,
)
from tests.web.helpers import sign_in

H = timedelta(hours=1)


def _partial(at: datetime, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    body = observation(at, gpus, status="partial")
    body["errors"] = ["process_list_unavailable"]
    return body


def _o1(at: datetime) -> dict[str, Any]:
    return _partial(
        at,
        [
            gpu(0, util=80, used=9000),
            gpu(1, util=0),
            gpu(2, util=50, procs=[proc("gdm", "graphics")]),
            gpu(3, util=3, procs=[proc("alice")]),
        ],
    )


def _ok(at: datetime) -> dict[str, Any]:
    return observation(
        at,
        [
            gpu(0, util=0, state="idle_held", used=9000),
            gpu(1, state="idle"),
            gpu(2, state="idle", procs=[proc("gdm", "graphics")]),
            gpu(3, util=90, state="active", procs=[proc("alice")]),
        ],
    )


def _start() -> datetime:
    return days_ago_midnight(3) + 10 * H


def _window() -> dict[str, str]:
    day = days_ago_midnight(3)
    return {"from": day.isoformat(), "to": (day + 24 * H).isoformat()}


async def _figures(client: Any, tenant: Any) -> dict[str, Any]:
    usage = await report(client, tenant, "usage", **_window())
    util = await report(client, tenant, "utilization", groupBy="gpu", bucket="day", **_window())
    return {
        "users": {
            r["user"]: (r["heldGpuHours"], r["activeGpuHours"], r["idleHeldGpuHours"])
            for r in usage["rows"]
        },
        "gpus": {
            r["gpuIndex"]: (r["coveredHours"], r["activeHours"], r["idleHeldHours"], r["idleHours"])
            for r in util["rows"]
        },
        "totals": usage["totals"],
    }


EXPECTED = {
    "users": {"alice": (1.5, 0.5, 1.0), "unknown": (1.5, 1.0, 0.5)},
    "gpus": {
        0: (1.5, 1.0, 0.5, 0.0),
        1: (1.5, 0.0, 0.0, 1.5),
        2: (1.5, 0.0, 0.0, 1.5),
        3: (1.5, 0.5, 1.0, 0.0),
    },
    "totals": {
        "heldGpuHours": 3.0,
        "activeGpuHours": 1.5,
        "idleHeldGpuHours": 1.5,
        "idleHeldShare": 0.5,
        "cost": None,  # no prices in this workspace
        "currency": None,
        # Every GPU reads 100 W: 3 held GPU-hours are 0.3 kWh, split like the time.
        "energyKWh": 0.3,
        "activeEnergyKWh": 0.15,
        "idleHeldEnergyKWh": 0.15,
        "energyCoveredHours": 3.0,
        "energyCost": None,  # no electricity price, no carbon intensity
        "co2eKg": None,
    },
}


# In order (the newest tick from the host row); o1 last (credited before o2 from the
# payload); o2 last (o1→o3 un-credited with o1's tick read back from raw samples).
@pytest.mark.parametrize("order", [(0, 1, 2), (1, 2, 0), (0, 2, 1)])
async def test_partial_and_nameless_held_time_billed_to_unknown(app, client, order) -> None:
    tenant = await quick_tenant(app, "partial")
    await set_max_gap(client, tenant, 7200)
    host = await enroll(client, tenant, "node-p")
    t = _start()
    bodies = [_o1(t), _ok(t + H), _ok(t + 1.5 * H)]
    for i in order:
        r = await push(client, host["agentToken"], bodies[i])
        assert r.status_code == 202, r.text

    assert await _figures(client, tenant) == EXPECTED

    async with await psycopg.AsyncConnection.connect(
        libpq_url(app.state.runtime.database_url)
    ) as conn:
        ws = await workspace_id(conn, tenant.slug)
        cur = await conn.execute(
            """
            SELECT d.gpu_index, g.reported_state, g.state FROM gpu_samples g
            JOIN gpus d ON d.workspace_id = g.workspace_id AND d.id = g.gpu_id
            WHERE g.workspace_id = %s AND g.observed_at = %s ORDER BY d.gpu_index
            """,
            [ws, t],
        )
        # The counted state is stored with the raw sample, beside what the agent sent.
        assert await cur.fetchall() == [
            (0, None, "active"),
            (1, None, "idle"),
            (2, None, "idle"),
            (3, None, "idle_held"),
        ]
        incremental = await rollup_rows(conn, ws)
        await conn.execute("DELETE FROM user_hour_rollups WHERE workspace_id = %s", [ws])
        await conn.execute("DELETE FROM gpu_hour_rollups WHERE workspace_id = %s", [ws])
        await conn.commit()
        async with conn.transaction():
            await rebuild(conn, ws, t - 2 * H, t + 3 * H)
        assert await rollup_rows(conn, ws) == incremental

    assert await _figures(client, tenant) == EXPECTED


async def test_busy_card_without_processes_is_active_in_hosts_api_and_fleet(app, client) -> None:
    tenant = await make_tenant(app, "busy")
    host = await enroll(client, tenant, "node-b")
    now = datetime.now(UTC) - timedelta(seconds=5)
    r = await push(client, host["agentToken"], _o1(now))
    assert r.status_code == 202, r.text

    listed = await client.get(f"/api/v1/workspaces/{tenant.slug}/hosts", headers=tenant.auth())
    assert listed.status_code == 200, listed.text
    (shown,) = listed.json()["hosts"]
    assert shown["freshness"] == "partial"
    assert [(g["index"], g["usageState"], g["reportedUsageState"]) for g in shown["gpus"]] == [
        (0, "active", None),
        (1, "idle", None),
        (2, "idle", None),
        (3, "idle_held", None),
    ]

    await sign_in(client, "member@busy.example")
    fleet = await client.get(f"/w/{tenant.slug}/fleet.json")
    assert fleet.status_code == 200, fleet.text
    body = fleet.json()
    counts = {k: body["counts"][k] for k in ("active", "idle_held", "idle", "not_observed")}
    assert counts == {"active": 1, "idle_held": 1, "idle": 2, "not_observed": 0}
    cards = {g["index"]: g for g in body["hosts"][0]["gpus"]}
    assert cards[0]["state"] == "active"
    assert cards[0]["holders"] == ["unknown"]  # who the reports bill for it
    assert cards[1]["holders"] == []
    assert cards[2]["holders"] == []
    assert cards[3]["holders"] == ["alice"]
    assert "Process list unavailable: state derived" in body["fragments"]["hosts"]


def test_derivation_rules() -> None:
    assert derive_state(80, False, process_list_unread=True) == "active"
    assert derive_state(5, False, process_list_unread=True) == "idle"
    assert derive_state(80, False) == "idle"
    assert derive_state(80, True) == "active"
    assert derive_state(5, True) == "idle_held"
    assert billed_users("active", ()) == ("unknown",)
    assert billed_users("idle_held", ()) == ("unknown",)
    assert billed_users("idle", ()) == ()
    assert billed_users("idle_held", ("alice", "bob")) == ("alice", "bob")


def test_every_way_of_obtaining_a_tick_bills_the_same() -> None:
    """A tick built at ingest, kept as the host's `latest_tick`, or read back from raw
    samples (holders from compute rows only) carries no `unknown`: crediting adds it."""
    tick = Tick(
        host_id=7,
        observed_us=10 * 3_600_000_000,
        gpus=(
            GpuTick(1, "active", 80, 100, 1000, ()),
            GpuTick(2, "idle_held", 0, 100, 1000, ()),
            GpuTick(3, "idle", 50, 100, 1000, ()),
            GpuTick(4, "idle_held", 0, 100, 1000, ("bob",)),
        ),
    )
    via_row = decode_tick(7, tick.observed_us, encode_tick(tick))
    assert via_row == tick
    end = tick.observed_us + 60_000_000
    direct, again = RollupDelta(), RollupDelta()
    direct.credit(tick, end, 120_000_000)
    again.credit(via_row, end, 120_000_000)
    assert direct.user == again.user
    minute = 60_000_000
    assert direct.user == {
        # held, active, idle-held; then the energy shares (no power read: none).
        (7, 1, "unknown", 36_000_000_000): [minute, minute, 0, 0, 0, 0],
        (7, 2, "unknown", 36_000_000_000): [minute, 0, minute, 0, 0, 0],
        (7, 4, "bob", 36_000_000_000): [minute, 0, minute, 0, 0, 0],
    }
    # Un-crediting is the exact inverse, the unknown rows included.
    direct.credit(tick, end, 120_000_000, sign=-1)
    assert all(v == [0] * 6 for v in direct.user.values())
