"""stateSince: the start of each GPU's unbroken run in its state, kept at ingest.

Every case is checked against a recompute from the definition (accounting.md), written
here independently of the board's code, over the observations the test sent.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from board.ingest.normalize import encode_tick
from tests.board.builders import enroll, make_tenant, push
from tests.board.db import execute, scalar

GAP = timedelta(seconds=120)  # the workspace default maxSampleGapSeconds


def _gpu(index: int, state: str, users: tuple[str, ...] = ()) -> dict[str, Any]:
    util = {"active": 90, "idle_held": 0, "idle": 0}[state]
    return {
        "index": index,
        "uuid": f"GPU-{index}",
        "name": "NVIDIA H100 80GB HBM3",
        "memoryTotalMb": 81559,
        "utilPct": util,
        "memoryUsedMb": 4000 if users else 0,
        "temperatureC": 40,
        "powerW": 100,
        "processes": [
            {
                "pid": 100 + n,
                "linuxUser": u,
                "name": "python",
                "type": "compute",
                "memoryUsedMb": 2000,
            }
            for n, u in enumerate(users)
        ],
        "usageState": state,
    }


def _snapshot(at: datetime, gpus: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {
        "schemaVersion": "availability.snapshot.v1",
        "collectionStatus": "ok" if gpus is not None else "error",
        "observedAt": at.isoformat(),
        "host": {"hostname": "node", "agentVersion": "1.8.0", "driverVersion": "560"},
        "gpus": gpus or [],
        "errors": [] if gpus is not None else ["nvml_unavailable"],
    }


Point = tuple[datetime, dict[int, tuple[str, tuple[str, ...]]] | None]


def _expected(points: list[Point]) -> dict[int, datetime]:
    """The definition, by brute force: walk back from the newest observation."""
    ordered = sorted(points, key=lambda p: p[0])
    newest_at, newest = ordered[-1]
    found: dict[int, datetime] = {}
    for gpu, key in (newest or {}).items():
        start = newest_at
        for (at, gpus), (next_at, _) in zip(
            reversed(ordered[:-1]), reversed(ordered[1:]), strict=True
        ):
            same = gpus is not None and gpus.get(gpu) == key
            if not same or next_at - at > GAP:
                break
            start = at
        found[gpu] = start
    return found


def _key(state: str, users: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    return (state, tuple(sorted(users)) if state != "idle" else ())


async def _send(client: Any, token: str, points: list[Point]) -> None:
    for at, gpus in points:
        body = _snapshot(
            at,
            None
            if gpus is None
            else [_gpu(i, state, users) for i, (state, users) in sorted(gpus.items())],
        )
        r = await push(client, token, body)
        assert r.status_code == 202, r.text


async def _since(client: Any, tenant: Any) -> dict[int, datetime | None]:
    r = await client.get(f"/api/v1/workspaces/{tenant.slug}/hosts", headers=tenant.auth())
    assert r.status_code == 200, r.text
    (host,) = r.json()["hosts"]
    return {
        g["index"]: datetime.fromisoformat(g["stateSince"]) if g["stateSince"] else None
        for g in host["gpus"]
    }


def _at(start: datetime, seconds: float) -> datetime:
    return start + timedelta(seconds=seconds)


@pytest.fixture
async def host(app: Any, client: Any) -> tuple[Any, str]:
    tenant = await make_tenant(app, "acme", password=None)
    enrolled = await enroll(client, tenant)
    return tenant, enrolled["agentToken"]


START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
BOB_HELD = ("idle_held", ("bob",))
ALICE_ACTIVE = ("active", ("alice",))
FREE = ("idle", ())


async def test_in_order_runs_break_on_state_users_gap_and_missing_gpu(host, client) -> None:
    tenant, token = host
    points: list[Point] = [
        (_at(START, 0), {0: BOB_HELD, 1: ALICE_ACTIVE, 2: FREE, 3: FREE}),
        (_at(START, 30), {0: BOB_HELD, 1: ALICE_ACTIVE, 2: FREE, 3: FREE}),
        # GPU 1 gains a second user: a new run; GPU 3 disappears for one observation.
        (_at(START, 60), {0: BOB_HELD, 1: ("active", ("alice", "carol")), 2: FREE}),
        (_at(START, 90), {0: BOB_HELD, 1: ("active", ("alice", "carol")), 2: FREE, 3: FREE}),
        (_at(START, 120), {0: BOB_HELD, 1: ("active", ("alice", "carol")), 2: FREE, 3: FREE}),
    ]
    await _send(client, token, points)
    since = await _since(client, tenant)
    assert since == {0: _at(START, 0), 1: _at(START, 60), 2: _at(START, 0), 3: _at(START, 90)}
    assert since == _expected(points)

    # A gap longer than maxSampleGap breaks every run; an error heartbeat too.
    later: list[Point] = [
        (_at(START, 121 + GAP.total_seconds()), {0: BOB_HELD, 1: FREE, 2: FREE, 3: FREE}),
        (_at(START, 400), None),
        (_at(START, 420), {0: BOB_HELD, 1: FREE, 2: FREE, 3: FREE}),
        (_at(START, 450), {0: BOB_HELD, 1: FREE, 2: ("idle_held", ("dave",)), 3: FREE}),
    ]
    await _send(client, token, later)
    since = await _since(client, tenant)
    assert since == _expected(points + later)
    assert since[0] == _at(START, 420)
    assert since[2] == _at(START, 450)


async def test_late_point_inside_a_run_breaks_it(host, client) -> None:
    tenant, token = host
    run = [(_at(START, s), {0: BOB_HELD, 1: FREE}) for s in (0, 60, 120, 180)]
    await _send(client, token, run)
    assert (await _since(client, tenant))[0] == _at(START, 0)
    late: Point = (_at(START, 90), {0: ALICE_ACTIVE, 1: FREE})
    await _send(client, token, [late])
    since = await _since(client, tenant)
    assert since == _expected([*run, late])
    assert since == {0: _at(START, 120), 1: _at(START, 0)}


async def test_late_point_bridging_a_gap_extends_the_run(host, client) -> None:
    tenant, token = host
    run = [(_at(START, s), {0: BOB_HELD}) for s in (0, 100, 200, 300)]
    await _send(client, token, run)  # 0 -> 100 -> 200 -> 300, all within the gap
    # Now a history with a hole: 500 is > 120 s after 300; a late 400 bridges it.
    more = [(_at(START, s), {0: BOB_HELD}) for s in (500, 560)]
    await _send(client, token, more)
    assert (await _since(client, tenant))[0] == _at(START, 500)
    bridge: Point = (_at(START, 400), {0: BOB_HELD})
    await _send(client, token, [bridge])
    assert (await _since(client, tenant))[0] == _at(START, 0)


async def test_any_arrival_order_gives_the_in_order_answer(app, client) -> None:
    rng = random.Random(14)
    states = [BOB_HELD, ALICE_ACTIVE, FREE, ("idle_held", ("bob", "carol"))]
    points: list[Point] = []
    at = START
    for _ in range(40):
        at += timedelta(seconds=rng.choice([30, 30, 30, 60, 150]))
        if rng.random() < 0.05:
            points.append((at, None))
            continue
        gpus = {
            i: rng.choice(states[:2]) if rng.random() < 0.15 else states[i % 3] for i in (0, 1, 2)
        }
        if rng.random() < 0.1:
            gpus.pop(2)
        points.append((at, gpus))
    points.append((at + timedelta(seconds=30), points[-1][1] or {0: FREE}))
    in_order = await make_tenant(app, "ordered", password=None)
    shuffled = await make_tenant(app, "shuffled", password=None)
    a = await enroll(client, in_order)
    b = await enroll(client, shuffled)
    await _send(client, a["agentToken"], points)
    mixed = points[:]
    rng.shuffle(mixed)
    await _send(client, b["agentToken"], mixed)
    expected = _expected(points)
    assert await _since(client, in_order) == expected
    assert await _since(client, shuffled) == expected


async def test_a_tick_from_before_the_upgrade_is_recomputed_at_the_next_push(
    app, host, client
) -> None:
    tenant, token = host
    run = [(_at(START, s), {0: BOB_HELD, 1: FREE}) for s in (0, 30, 60)]
    await _send(client, token, run)
    tick = await scalar(app, "SELECT latest_tick FROM hosts")
    # The tick as the board wrote it before stateSince existed: six elements per GPU.
    stripped = json.dumps([g[:6] for g in json.loads(tick)], separators=(",", ":"))
    await execute(app, "UPDATE hosts SET latest_tick = %s", stripped)
    assert await _since(client, tenant) == {0: None, 1: None}
    nxt: Point = (_at(START, 90), {0: BOB_HELD, 1: ALICE_ACTIVE})
    await _send(client, token, [nxt])
    assert await _since(client, tenant) == {0: _at(START, 0), 1: _at(START, 90)}


def test_tick_encoding_keeps_state_since_as_a_seventh_element() -> None:
    from board.ingest.normalize import decode_since, decode_tick
    from board.rollups.crediting import GpuTick, Tick

    tick = Tick(7, 1_000, (GpuTick(3, "idle_held", 0, 10, 20, ("bob",)),))
    encoded = encode_tick(tick, {3: 500})
    assert decode_since(encoded) == {3: 500}
    assert decode_tick(7, 1_000, encoded) == tick
    assert decode_since(encode_tick(tick)) is None
