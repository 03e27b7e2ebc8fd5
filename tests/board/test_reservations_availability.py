"""Availability of a GPU from its newest state and the booking in force."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from board.db.connection import report_connection
from board.reservations.availability import availability, bookings_in_force
from tests.board.builders import enroll, push
from tests.board.reservation_builders import book_at
from tests.board.test_reports_builders import gpu, observation, quick_tenant

ALICE = frozenset({"alice"})


def test_the_availability_rule() -> None:
    assert availability(False, "active", ("alice",), None) == "not_observed"
    assert availability(True, "idle", (), None) == "free"
    assert availability(True, "active", ("bob",), None) == "in_use"
    assert availability(True, "active", (), None) == "in_use"  # held, nobody named
    assert availability(True, "active", ("alice",), ALICE) == "reserved_in_use"
    assert availability(True, "idle_held", ("alice",), ALICE) == "reserved_idle"
    assert availability(True, "idle", (), ALICE) == "reserved_idle"
    assert availability(True, "active", ("bob",), ALICE) == "reserved_conflict"
    assert availability(True, "active", ("alice", "bob"), ALICE) == "reserved_in_use"


async def test_bookings_in_force_now(app, client) -> None:
    tenant = await quick_tenant(app, "avail")
    host = await enroll(client, tenant, "node")
    now = datetime.now(UTC)
    assert (
        await push(client, host["agentToken"], observation(now, [gpu(0), gpu(1)]))
    ).status_code == 202
    start = now.replace(second=0, microsecond=0)
    made = await book_at(
        app,
        tenant,
        now,
        hostId=host["hostId"],
        gpuUuids=["GPU-1"],
        start=start.isoformat(),
        end=(start + timedelta(hours=1)).isoformat(),
    )
    async with app.state.runtime.sessions() as session:
        conn = await report_connection(session)
        cur = await conn.execute(
            "SELECT id, workspace_id FROM hosts WHERE public_id = %s", [host["hostId"]]
        )
        host_id, ws = await cur.fetchone()
        found = await bookings_in_force(conn, ws, [host_id], now + timedelta(seconds=1))
        assert list(found) == [(host_id, "GPU-1")]
        assert found[(host_id, "GPU-1")].reservation_id == made.reservation_id
        assert await bookings_in_force(conn, ws, [host_id], start + timedelta(hours=2)) == {}


async def test_max_reservation_days_is_a_setting(app, client) -> None:
    tenant = await quick_tenant(app, "avail")
    url = f"/api/v1/workspaces/{tenant.slug}/settings"
    assert (await client.get(url, headers=tenant.auth())).json()["maxReservationDays"] == 14
    r = await client.patch(url, json={"maxReservationDays": 30}, headers=tenant.auth())
    assert r.status_code == 200
    assert r.json()["maxReservationDays"] == 30
    for bad in (0, 367, "3", None):
        r = await client.patch(url, json={"maxReservationDays": bad}, headers=tenant.auth())
        assert r.status_code == 422, r.text
