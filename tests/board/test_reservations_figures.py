"""Hand-computed reservation figures: the four classes, hour and day boundaries, a
booking made after its data arrived, a running booking cancelled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.board.builders import enroll
from tests.board.reservation_builders import (
    MINUTE,
    book_at,
    busy_host,
    cancel_at,
    push_series,
    reservation_report,
)
from tests.board.test_reports_builders import days_ago_midnight, quick_tenant

# 23:30 → 01:00 across a UTC midnight: alice works 30 min, then holds the card idle
# 20 min, then bob runs on it 20 min, then nobody 20 min (one observation a minute).
KINDS = ["used"] * 30 + ["idle_held"] * 20 + ["conflict"] * 20 + ["unused"] * 20
LENGTH = timedelta(minutes=90)


def _window(start):
    day = start.replace(hour=0, minute=0)
    return {
        "from": (day - timedelta(days=1)).isoformat(),
        "to": (day + timedelta(days=2)).isoformat(),
    }


async def test_the_four_classes_before_and_after_the_data(app, client) -> None:
    tenant = await quick_tenant(app, "resv")
    start = days_ago_midnight(1) - timedelta(minutes=30)
    before = await enroll(client, tenant, "booked-before")
    after = await enroll(client, tenant, "booked-after")
    # GPUs exist once a host has reported; the last observation closes minute 89.
    await push_series(client, before["agentToken"], start - 2 * MINUTE, ["unused"])
    first = await book_at(
        app,
        tenant,
        start - MINUTE,
        hostId=before["hostId"],
        gpuUuids=["GPU-0"],
        start=start.isoformat(),
        end=(start + LENGTH).isoformat(),
        linuxUsers=["alice"],
    )
    await push_series(client, before["agentToken"], start, [*KINDS, "unused"])
    await push_series(client, after["agentToken"], start, [*KINDS, "unused"])
    second = await book_at(
        app,
        tenant,
        start + 4 * MINUTE,
        hostId=after["hostId"],
        start=start.isoformat(),
        end=(start + LENGTH).isoformat(),
        linuxUsers=["alice"],
    )
    body = await reservation_report(client, tenant, **_window(start))
    rows = {r["reservationId"]: r for r in body["rows"]}
    for made in (first, second):
        row = rows[made.reservation_id]
        assert row["reservedGpuHours"] == 1.5
        assert row["coveredGpuHours"] == 1.5
        assert row["usedGpuHours"] == 0.5
        assert row["idleHeldGpuHours"] == round(20 / 60, 6)
        assert row["conflictGpuHours"] == round(20 / 60, 6)
        assert row["unusedGpuHours"] == round(20 / 60, 6)
        assert row["reservedIdleGpuHours"] == round(40 / 60, 6)
        assert row["usedShare"] == round(30 / 90, 6)
    assert body["totals"]["reservedGpuHours"] == 3.0

    # The day cut: 30 minutes (all used) before midnight, 60 after.
    days = await reservation_report(client, tenant, groupBy="day", **_window(start))
    by_day = {r["day"]: r for r in days["rows"]}
    assert by_day[start.date().isoformat()]["usedGpuHours"] == 1.0  # two bookings
    assert by_day[start.date().isoformat()]["reservedGpuHours"] == 1.0
    later = (start + LENGTH).date().isoformat()
    assert by_day[later]["reservedGpuHours"] == 2.0
    assert by_day[later]["idleHeldGpuHours"] == round(40 / 60, 6)

    # A window of one hour cuts the booking at hour boundaries: 00:00–01:00.
    hour = {"from": (start + 30 * MINUTE).isoformat(), "to": (start + LENGTH).isoformat()}
    cut = await reservation_report(client, tenant, groupBy="member", **hour)
    (row,) = cut["rows"]
    assert row["memberEmail"] == f"member@{tenant.slug}.example"
    assert row["reservedGpuHours"] == 2.0
    assert row["usedGpuHours"] == 0.0
    assert row["conflictGpuHours"] == round(40 / 60, 6)


async def test_a_running_booking_cancelled_keeps_its_past(app, client) -> None:
    tenant = await quick_tenant(app, "resv")
    start = days_ago_midnight(1) - timedelta(minutes=30)
    host = await enroll(client, tenant, "node")
    await push_series(client, host["agentToken"], start - 2 * MINUTE, ["unused"])
    made = await book_at(
        app,
        tenant,
        start,
        hostId=host["hostId"],
        start=start.isoformat(),
        end=(start + LENGTH).isoformat(),
        linuxUsers=["alice"],
    )
    await push_series(client, host["agentToken"], start, [*KINDS, "unused"])
    await cancel_at(app, tenant, made.reservation_id, start + 40 * MINUTE)
    body = await reservation_report(client, tenant, **_window(start))
    (row,) = body["rows"]
    assert row["end"] == (start + 40 * MINUTE).isoformat()
    assert row["reservedGpuHours"] == round(40 / 60, 6)
    assert row["usedGpuHours"] == 0.5
    assert row["idleHeldGpuHours"] == round(10 / 60, 6)
    assert row["conflictGpuHours"] == 0.0


async def test_reserved_hours_across_a_dst_change_are_the_hours_booked(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was 48 GPU-hours for a 47-hour booking: the report cut a booking at local
    midnights and subtracted two times of one zone as wall-clock times (Python's rule for
    a shared tzinfo), so the day the clocks sprang forward counted 24 hours, not 23."""
    tenant = await quick_tenant(app, "dst")
    host_id = await busy_host(app, client, tenant, "dst-node")
    base = f"/api/v1/workspaces/{tenant.slug}"
    # Over the night New York springs forward (2027-03-14), less than a year ahead
    # until then; later runs book the same span a year on (2028-03-12).
    year = 2027 if datetime.now(UTC) < datetime(2027, 3, 1, tzinfo=UTC) else 2028
    first = 13 if year == 2027 else 11
    start = f"{year}-03-{first:02d}T12:00:00-05:00"
    end = f"{year}-03-{first + 2:02d}T12:00:00-04:00"
    r = await client.post(
        f"{base}/reservations",
        json={"hostId": host_id, "start": start, "end": end},
        headers=tenant.auth(),
    )
    assert r.status_code == 201, r.text
    query = f"from={year}-03-{first - 1:02d}&to={year}-03-{first + 4:02d}&tz=America/New_York"
    days = (
        await client.get(f"{base}/reports/reservations?{query}&groupBy=day", headers=tenant.auth())
    ).json()
    assert {row["day"]: row["reservedGpuHours"] for row in days["rows"]} == {
        f"{year}-03-{first:02d}": 12.0,
        f"{year}-03-{first + 1:02d}": 23.0,
        f"{year}-03-{first + 2:02d}": 12.0,
    }, days
    assert days["totals"]["reservedGpuHours"] == 47.0
    for group in ("reservation", "member", "host"):
        shown = (
            await client.get(
                f"{base}/reports/reservations?{query}&groupBy={group}", headers=tenant.auth()
            )
        ).json()
        assert [row["reservedGpuHours"] for row in shown["rows"]] == [47.0], (group, shown)
