"""GET …/capacity: free GPUs now, unbooked ones through a range ahead (bookings on some
GPUs, a maintenance window on a host), best fit first; tenancy; bad parameters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.board.answers import refused
from tests.board.builders import Tenant, enroll, make_tenant, push
from tests.board.test_reports_builders import gpu, observation, proc

A100 = "NVIDIA A100 80GB"
H100 = "NVIDIA H100 80GB HBM3"
TOTAL = 81920


def card(index: int, name: str, used: int, user: str | None = None) -> dict[str, Any]:
    if user:
        body = gpu(index, util=90, state="active", procs=[proc(user)], used=used, total=TOTAL)
    else:
        body = gpu(index, util=0, state="idle", used=used, total=TOTAL)
    body["name"] = name
    return body


async def fleet(app: Any, client: httpx.AsyncClient) -> tuple[Tenant, dict[str, str]]:
    """node-a: 4 A100s, GPU-0 busy; node-b: 2 idle H100s; node-c: 8 idle GPUs, stale."""
    acme = await make_tenant(app, "acme")
    ids = {}
    now = datetime.now(UTC)
    cards = {
        "node-a": [card(0, A100, 40000, "alice"), card(1, A100, 0), card(2, A100, 2000)]
        + [card(3, A100, 500)],
        "node-b": [card(0, H100, 0), card(1, H100, 1000)],
        "node-c": [card(i, A100, 0) for i in range(8)],
    }
    for name, listed in cards.items():
        host = await enroll(client, acme, name)
        ids[name] = host["hostId"]
        when = now - (timedelta(hours=1) if name == "node-c" else timedelta(seconds=5))
        r = await push(client, host["agentToken"], observation(when, listed))
        assert r.status_code == 202, r.text
    return acme, ids


async def ask(client: httpx.AsyncClient, tenant: Tenant, role: str = "member", **params: Any):
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/capacity", params=params, headers=tenant.auth(role)
    )
    assert r.status_code == 200, r.text
    return r.json()


def picked(answer: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [(c["displayName"], [g["uuid"] for g in c["gpus"]]) for c in answer["candidates"]]


async def test_free_now_best_fit_first(app, client) -> None:
    acme, _ = await fleet(app, client)
    two = await ask(client, acme, gpus=2)
    assert two["fits"] is True
    # node-b has exactly 2 free (nothing left over) before node-a's 3; on node-a the two
    # with the least memory that suffices; the busy GPU-0 and stale node-c never.
    assert picked(two) == [("node-b", ["GPU-1", "GPU-0"]), ("node-a", ["GPU-2", "GPU-3"])]
    first = two["candidates"][0]
    assert set(first) == {"hostId", "displayName", "gpus"}
    assert first["gpus"][0] == {
        "uuid": "GPU-1",
        "index": 1,
        "name": H100,
        "freeMemoryMb": TOTAL - 1000,
        "availability": "free",
        "memoryTotalMb": TOTAL,
    }
    assert picked(await ask(client, acme, gpus=3)) == [("node-a", ["GPU-2", "GPU-3", "GPU-1"])]
    # Nowhere 4 on one host: not fits, the closest host shown.
    four = await ask(client, acme, gpus=4)
    assert four["fits"] is False
    assert picked(four) == [("node-a", ["GPU-2", "GPU-3", "GPU-1"])]
    # On any hosts: as few as possible.
    spread = await ask(client, acme, gpus=4, sameHost="false")
    assert spread["fits"] is True
    assert picked(spread) == [("node-a", ["GPU-2", "GPU-3", "GPU-1"]), ("node-b", ["GPU-1"])]
    assert (await ask(client, acme, gpus=6, sameHost="false"))["fits"] is False
    # A model (part of the name, any case) and a memory floor.
    assert picked(await ask(client, acme, model="h100")) == [("node-b", ["GPU-1"])]
    roomy = await ask(client, acme, gpus=2, minFreeMemoryMb=80000)
    assert picked(roomy) == [("node-b", ["GPU-1", "GPU-0"]), ("node-a", ["GPU-3", "GPU-1"])]
    # Finance may ask too (the host inventory is theirs to read).
    assert (await ask(client, acme, role="finance"))["fits"] is True


async def test_a_range_ahead_with_bookings_on_some_gpus(app, client) -> None:
    from tests.board.reservation_builders import book_at

    acme, ids = await fleet(app, client)
    now = datetime.now(UTC)
    day = (now + timedelta(days=1)).date().isoformat()
    await book_at(
        app,
        acme,
        now,
        hostId=ids["node-a"],
        gpuUuids=["GPU-1", "GPU-2"],
        start=f"{day}T09:00:00+00:00",
        end=f"{day}T12:00:00+00:00",
    )
    during = {"from": f"{day}T10:00:00Z", "to": f"{day}T11:00:00Z"}
    answer = await ask(client, acme, gpus=2, **during)
    assert answer["from"] == f"{day}T10:00:00+00:00"
    # node-a's booked GPU-1 and GPU-2 are out; its busy GPU-0 is not (nobody booked it
    # then), shown with its availability now; a booking has the whole card's memory.
    assert picked(answer) == [("node-a", ["GPU-0", "GPU-3"]), ("node-b", ["GPU-0", "GPU-1"])]
    node_a = answer["candidates"][0]["gpus"]
    assert [(g["availability"], g["freeMemoryMb"]) for g in node_a] == [
        ("in_use", TOTAL),
        ("free", TOTAL),
    ]
    # A range that only touches the booking's end is clear of it.
    after = await ask(client, acme, gpus=4, **{"from": f"{day}T12:00", "to": f"{day}T13:00"})
    assert picked(after) == [("node-a", ["GPU-0", "GPU-1", "GPU-2", "GPU-3"])]
    # A range that began already is asked from now: free now and unbooked through it.
    began = {"from": (now - timedelta(hours=2)).isoformat(), "to": f"{day}T10:00:00Z"}
    assert picked(await ask(client, acme, gpus=1, **began)) == [
        ("node-a", ["GPU-3"]),
        ("node-b", ["GPU-1"]),
    ]

    # A maintenance window on node-b over the range takes it out; now it is still offered.
    r = await client.post(
        f"/api/v1/workspaces/acme/hosts/{ids['node-b']}/maintenance",
        json={"start": f"{day}T08:00:00Z", "end": f"{day}T10:30:00Z"},
        headers=acme.auth(),
    )
    assert r.status_code == 201, r.text
    assert picked(await ask(client, acme, gpus=2, **during)) == [("node-a", ["GPU-0", "GPU-3"])]
    assert picked(await ask(client, acme, gpus=2))[0][0] == "node-b"


async def test_a_booking_in_force_now_and_a_window_now(app, client) -> None:
    from tests.board.reservation_builders import book_at

    acme, ids = await fleet(app, client)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    await book_at(
        app,
        acme,
        now,
        hostId=ids["node-b"],
        gpuUuids=["GPU-1"],
        start=now.isoformat(),
        end=(now + timedelta(hours=1)).isoformat(),
    )
    assert picked(await ask(client, acme, model="H100")) == [("node-b", ["GPU-0"])]
    r = await client.post(
        f"/api/v1/workspaces/acme/hosts/{ids['node-a']}/maintenance",
        json={
            "start": (now - timedelta(hours=1)).isoformat(),
            "end": (now + timedelta(hours=1)).isoformat(),
        },
        headers=acme.auth(),
    )
    assert r.status_code == 201, r.text
    assert picked(await ask(client, acme, gpus=1)) == [("node-b", ["GPU-0"])]


async def test_another_workspace_is_not_found(app, client) -> None:
    acme, _ = await fleet(app, client)
    other = await make_tenant(app, "other")
    r = await client.get("/api/v1/workspaces/acme/capacity", headers=other.auth())
    refused(r, 404)
    r = await client.get("/api/v1/workspaces/acme/capacity")
    refused(r, 401)
    assert (await ask(client, other))["candidates"] == []


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"gpus": "0"}, "gpus must be a whole number from 1 to 1024"),
        ({"gpus": "-2"}, "gpus must be a whole number"),
        ({"gpus": "100000000000"}, "gpus must be a whole number"),
        ({"gpus": "two"}, "gpus must be a whole number"),
        ({"minFreeMemoryMb": "-5"}, "minFreeMemoryMb must be a whole number"),
        ({"sameHost": "maybe"}, "sameHost must be true or false"),
        ({"model": "x" * 101}, "model is at most 100 characters"),
        ({"model": "A100\nB"}, "control characters"),
        ({"from": "2030-01-02T10:00:00Z"}, "from and to go together"),
        ({"from": "2030-01-02T10:00:00Z", "to": "2030-01-02T10:00:00Z"}, "must be after from"),
        ({"from": "2030-01-02T11:00:00Z", "to": "2030-01-02T10:00:00Z"}, "must be after from"),
        ({"from": "2030-13-02", "to": "2030-01-03"}, "not a real date"),
        ({"from": "tomorrow", "to": "2030-01-03"}, "is not a date"),
        ({"from": "2030-01-02T10:00:00+25:00", "to": "2030-01-03"}, "not a real date"),
        ({"from": "2020-01-01", "to": "2020-01-02"}, "to is in the past"),
        ({"from": "2030-01-01", "to": "2032-01-02"}, "at most 366 days"),
        ({"from": "9999-12-31T23:00:00-12:00", "to": "9999-12-31T23:30:00-12:00"}, "range"),
    ],
)
async def test_bad_parameters_are_a_sentence(app, client, params, words) -> None:
    acme = await make_tenant(app, "acme")
    r = await client.get("/api/v1/workspaces/acme/capacity", params=params, headers=acme.auth())
    detail = refused(r, 422)
    assert words in detail, detail
