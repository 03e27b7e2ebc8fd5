"""Booking a GPU someone else is on now: the API books it and answers `warnings` naming
who is on which GPU (existing clients read the same 201)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.board.builders import enroll, make_tenant, push
from tests.board.test_reports_builders import gpu, observation, proc


async def _busy_host(client: Any, tenant: Any, at: datetime | None = None) -> dict[str, Any]:
    host = await enroll(client, tenant, "node")
    gpus = [
        gpu(0, util=90, state="active", procs=[proc("alice")]),
        gpu(1, util=0, state="idle_held", procs=[proc("bob")]),
        gpu(2, util=80, state="active", procs=[proc("bob"), proc("carol")]),
        gpu(3, util=0, state="idle", procs=[]),
    ]
    r = await push(client, host["agentToken"], observation(at or datetime.now(UTC), gpus))
    assert r.status_code == 202, r.text
    return host


async def _book(client: Any, tenant: Any, host: str, uuids: list[str], **extra: Any) -> Any:
    start = datetime.now(UTC).replace(second=0, microsecond=0) + extra.pop("later", timedelta())
    body = {
        "hostId": host,
        "gpuUuids": uuids,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=2)).isoformat(),
        **extra,
    }
    return await client.post(
        f"/api/v1/workspaces/{tenant.slug}/reservations", json=body, headers=tenant.auth("member")
    )


async def test_booking_busy_gpus_answers_warnings_naming_who_is_on_them(app, client) -> None:
    tenant = await make_tenant(app, "busy")
    host = await _busy_host(client, tenant)
    linked = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/directory/bob",
        json={"memberEmail": f"admin@{tenant.slug}.example", "team": None},
        headers=tenant.auth(),
    )
    assert linked.status_code == 200, linked.text

    made = await _book(
        client, tenant, host["hostId"], ["GPU-0", "GPU-1", "GPU-2", "GPU-3"], linuxUsers=["carol"]
    )
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["gpuUuids"] == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]  # booked all the same
    admin = f"admin@{tenant.slug}.example"
    assert body["warnings"] == [
        {
            "code": "gpu_busy",
            "gpuUuid": "GPU-0",
            "gpuIndex": 0,
            "state": "active",
            "linuxUsers": ["alice"],
            "memberEmails": [],
            "detail": "GPU 0 is in use now by alice.",
        },
        {
            "code": "gpu_busy",
            "gpuUuid": "GPU-1",
            "gpuIndex": 1,
            "state": "idle_held",
            "linuxUsers": ["bob"],
            "memberEmails": [admin],
            "detail": f"GPU 1 is idle-held now by bob ({admin}).",
        },
        {
            # carol is the booking's own: only bob is someone else.
            "code": "gpu_busy",
            "gpuUuid": "GPU-2",
            "gpuIndex": 2,
            "state": "active",
            "linuxUsers": ["bob"],
            "memberEmails": [admin],
            "detail": f"GPU 2 is in use now by bob ({admin}).",
        },
    ]
    # GET shows the booking as it always did (the warnings belong to the booking's answer).
    one = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reservations/{body['reservationId']}",
        headers=tenant.auth(),
    )
    assert "warnings" not in one.json()


async def test_no_warning_for_ones_own_users_a_later_start_or_a_stale_host(app, client) -> None:
    tenant = await make_tenant(app, "busy")
    host = await _busy_host(client, tenant)
    mine = await _book(client, tenant, host["hostId"], ["GPU-0"], linuxUsers=["alice"])
    assert mine.status_code == 201, mine.text
    assert mine.json()["warnings"] == []
    idle = await _book(client, tenant, host["hostId"], ["GPU-3"])
    assert idle.json()["warnings"] == []
    # Starting in two hours: whoever is on it now may well be done by then.
    later = await _book(client, tenant, host["hostId"], ["GPU-2"], later=timedelta(hours=2))
    assert later.status_code == 201, later.text
    assert later.json()["warnings"] == []

    other = await make_tenant(app, "busy-stale")
    stale = await _busy_host(client, other, datetime.now(UTC) - timedelta(hours=3))
    r = await _book(client, other, stale["hostId"], ["GPU-2"])
    assert r.status_code == 201, r.text
    assert r.json()["warnings"] == []  # not observed now: nothing to say of it
