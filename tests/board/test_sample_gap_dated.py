"""maxSampleGap is dated: each value holds from its `from` until the next one, and an
interval is judged by the value in force at its opening observation: by a late point
that splits an interval after a change too, and for a host enrolled while a back-dated
change runs. A `from` must be an instant from 1970 on.

The scenario (alice holds GPU-0 of one host, booked for her 10:00–11:00 yesterday):
observations at 10:00, 10:01, 10:02, 10:10, 10:11, 10:12, 10:30, 10:31. Under the
default 120 s, the 8- and 18-minute intervals are gaps: 5 minutes covered. A value of
1,200 s back-dated to 10:05 re-judges only what opens at or after 10:05, so 10:12→10:30
is credited (23 minutes) while 10:02→10:10, opened before, stays a gap.

Also attacked, and held (no test of their own): the same GPU UUIDs on two hosts of one
workspace and of two, UUIDs appearing and vanishing between pushes, a GPU index reused by
another UUID, duplicate pushes (same observedAt, other content) in one batch and across
batches, points on hour and day boundaries and 1 µs either side, observedAt jumping back
and forth by up to 1.5 h, ok/partial/error mixes, `unknown` and graphics processes,
bookings in force on some GPUs, compaction of closed days between pushes: the rollups and
reservation figures of both workspaces equal `gua-board rollups rebuild` to the
microsecond. As `maxSampleGapFrom`: odd but valid offsets, nanoseconds, ISO week dates,
`23:59:60`, strings of 100,000 characters, numbers, lists, objects and booleans (each a
422 with one sentence), a `from` in the future, DST-ambiguous and non-existent local
times on the admin form; a member, finance or another workspace's admin changing it
(403/404, nothing changed); the 200-value history cap; twelve PATCHes with random
back-dated values racing shuffled pushes and late points of three hosts, one booked:
rollups and figures equal a rebuild.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from board.cli.rollups import rebuild_command
from board.db.urls import libpq_url
from board.ingest.state_since import advance
from board.reservations.figures import figure_rows
from board.rollups.crediting import GpuTick, Tick, to_us
from board.rollups.gaps import GapSchedule
from board.runtime import Runtime
from tests.board.builders import Tenant, enroll, make_tenant, push
from tests.board.db import scalar
from tests.board.reservation_builders import MINUTE, book_at, reservation_report
from tests.board.test_reports_builders import (
    day_rollups_mismatch,
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
from tests.web.helpers import csrf_of, sign_in

SETTINGS = "/api/v1/workspaces/{slug}/settings"
POINTS = (0, 1, 2, 10, 11, 12, 30, 31)  # minutes after 10:00


def _alice() -> list[dict[str, Any]]:
    return [gpu(0, util=90, state="active", procs=[proc("alice")])]


async def _scenario(app: Any, client: httpx.AsyncClient) -> tuple[Tenant, str, datetime]:
    tenant = await quick_tenant(app, "gap")
    host = await enroll(client, tenant, "node-gap")
    ten = days_ago_midnight(1) + timedelta(hours=10)
    # An hour earlier, so the host has a GPU to book (then a gap: nothing is covered).
    r = await push(client, host["agentToken"], observation(ten - 60 * MINUTE, _alice()))
    assert r.status_code == 202, r.text
    await book_at(
        app,
        tenant,
        ten - MINUTE,
        hostId=host["hostId"],
        start=ten.isoformat(),
        end=(ten + timedelta(hours=1)).isoformat(),
        linuxUsers=["alice"],
    )
    for minutes in POINTS:
        r = await push(client, host["agentToken"], observation(ten + minutes * MINUTE, _alice()))
        assert r.status_code == 202, r.text
    return tenant, host["agentToken"], ten


async def _change(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]
) -> httpx.Response:
    return await client.patch(SETTINGS.format(slug=tenant.slug), json=body, headers=tenant.auth())


async def _minutes(client: httpx.AsyncClient, tenant: Tenant, ten: datetime) -> dict[str, float]:
    """Covered, alice's held, and the booking's covered minutes in 10:00–11:00."""
    window = {"from": ten.isoformat(), "to": (ten + timedelta(hours=1)).isoformat()}
    util = await report(client, tenant, "utilization", **window, groupBy="gpu")
    usage = await report(client, tenant, "usage", **window, groupBy="user")
    booked = await reservation_report(client, tenant, **window)
    held = {row["user"]: float(row["heldGpuHours"]) for row in usage["rows"]}
    return {
        "covered": round(sum(float(r["coveredHours"]) for r in util["rows"]) * 60, 2),
        "alice": round(held.get("alice", 0.0) * 60, 2),
        "booked": round(sum(float(r["coveredGpuHours"]) for r in booked["rows"]) * 60, 2),
    }


async def _equals_a_rebuild(app: Any, tenant: Tenant, settings: Any) -> None:
    """The rollups and reservation figures ingest and the change wrote are what a rebuild
    from raw writes (and the day rows agree with the hours)."""
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        far = datetime.now(UTC) - timedelta(days=7)
        written = await rollup_rows(conn, ws), await figure_rows(conn, ws, far, far + 14 * DAY)
        args = argparse.Namespace(workspace=tenant.slug, from_=None, to=None)
        assert await asyncio.to_thread(rebuild_command, args, settings) == 0
        rebuilt = await rollup_rows(conn, ws), await figure_rows(conn, ws, far, far + 14 * DAY)
        assert rebuilt == written
        assert await day_rollups_mismatch(conn, ws) == []


DAY = timedelta(days=1)


async def test_a_back_dated_change_re_credits_exactly_what_it_covers(app, client, settings) -> None:
    tenant, agent, ten = await _scenario(app, client)
    assert await _minutes(client, tenant, ten) == {"covered": 5, "alice": 5, "booked": 5}

    r = await _change(
        client,
        tenant,
        {"maxSampleGapSeconds": 1200, "maxSampleGapFrom": (ten + 5 * MINUTE).isoformat()},
    )
    assert r.status_code == 200, r.text
    assert r.json()["maxSampleGapSeconds"] == 1200
    assert r.json()["maxSampleGapHistory"] == [
        {"seconds": 120, "from": None},
        {"seconds": 1200, "from": (ten + 5 * MINUTE).isoformat()},
    ]
    # 10:12→10:30 (opened after 10:05) is credited; 10:02→10:10 (opened before) is not.
    assert await _minutes(client, tenant, ten) == {"covered": 23, "alice": 23, "booked": 23}
    await _equals_a_rebuild(app, tenant, settings)

    # A late point at 10:06 splits the old gap: 10:02→10:06 is still judged by 120 s (a
    # gap), 10:06→10:10 by 1,200 s (4 minutes).
    r = await push(client, agent, observation(ten + 6 * MINUTE, _alice()))
    assert r.status_code == 202, r.text
    assert await _minutes(client, tenant, ten) == {"covered": 27, "alice": 27, "booked": 27}
    await _equals_a_rebuild(app, tenant, settings)


async def test_a_change_from_now_never_re_judges_older_intervals(app, client, settings) -> None:
    """Lowered to 30 s now: yesterday's 1-minute intervals stay, and so does a late point's
    split of an interval opened before the change (both halves judged by 120 s)."""
    tenant, agent, ten = await _scenario(app, client)
    r = await _change(client, tenant, {"maxSampleGapSeconds": 30})
    assert r.status_code == 200, r.text
    assert await _minutes(client, tenant, ten) == {"covered": 5, "alice": 5, "booked": 5}
    # 10:30→10:31 credited under 120 s splits into two halves, each under 120 s.
    r = await push(client, agent, observation(ten + timedelta(minutes=30, seconds=40), _alice()))
    assert r.status_code == 202, r.text
    assert await _minutes(client, tenant, ten) == {"covered": 5, "alice": 5, "booked": 5}
    await _equals_a_rebuild(app, tenant, settings)


async def test_a_correction_of_the_last_change_replaces_it(app, client) -> None:
    tenant, _, ten = await _scenario(app, client)
    at = (ten + 5 * MINUTE).isoformat()
    for seconds in (1200, 600):  # a typo, then its correction at the same instant
        r = await _change(client, tenant, {"maxSampleGapSeconds": seconds, "maxSampleGapFrom": at})
        assert r.status_code == 200, r.text
    assert r.json()["maxSampleGapHistory"] == [
        {"seconds": 120, "from": None},
        {"seconds": 600, "from": at},
    ]
    # Under 600 s from 10:05: 10:10→10:12 and 10:30→10:31 only (10:12→10:30 is 18 min).
    assert await _minutes(client, tenant, ten) == {"covered": 5, "alice": 5, "booked": 5}
    # The same value again changes nothing, and adds no entry.
    r = await _change(client, tenant, {"maxSampleGapSeconds": 600})
    assert len(r.json()["maxSampleGapHistory"]) == 2


@pytest.mark.parametrize(
    ("body", "status", "sentence"),
    [
        ({"maxSampleGapFrom": "2026-01-01T00:00:00Z"}, 422, "goes with maxSampleGapSeconds"),
        (
            {"maxSampleGapSeconds": 300, "maxSampleGapFrom": "2026-01-01T00:00:00"},
            422,
            "zone offset",
        ),
        ({"maxSampleGapSeconds": 300, "maxSampleGapFrom": "yesterday"}, 422, "zone offset"),
        ({"maxSampleGapSeconds": 300, "maxSampleGapFrom": 1700000000}, 422, "zone offset"),
        ({"maxSampleGapSeconds": 300, "maxSampleGapFrom": "9" * 5000}, 422, "zone offset"),
        ({"maxSampleGapSeconds": 300, "maxSampleGapFrom": None}, 422, "zone offset"),
        (
            {"maxSampleGapSeconds": 300, "maxSampleGapFrom": "2999-01-01T00:00:00Z"},
            422,
            "must not be in the future",
        ),
    ],
)
async def test_refusals_say_what_is_wrong_and_change_nothing(
    app, client, body: dict[str, Any], status: int, sentence: str
) -> None:
    tenant = await quick_tenant(app, "gaprefuse")
    r = await _change(client, tenant, body)
    assert r.status_code == status, r.text
    assert isinstance(r.json()["detail"], str)
    assert sentence in r.json()["detail"]
    got = (await client.get(SETTINGS.format(slug=tenant.slug), headers=tenant.auth())).json()
    assert got["maxSampleGapHistory"] == [{"seconds": 120, "from": None}]


async def test_a_change_dated_before_the_last_one_supersedes_it(app, client) -> None:
    """Changed today, meant since 10:00 yesterday: made again from then, it replaces the
    value dated later (a value holds from its `from` on)."""
    tenant, _, ten = await _scenario(app, client)
    r = await _change(client, tenant, {"maxSampleGapSeconds": 1200})
    assert r.status_code == 200, r.text
    assert await _minutes(client, tenant, ten) == {"covered": 5, "alice": 5, "booked": 5}
    r = await _change(
        client, tenant, {"maxSampleGapSeconds": 1200, "maxSampleGapFrom": ten.isoformat()}
    )
    assert r.status_code == 200, r.text
    assert r.json()["maxSampleGapHistory"] == [
        {"seconds": 120, "from": None},
        {"seconds": 1200, "from": ten.isoformat()},
    ]
    # 10:02→10:10 and 10:12→10:30 are credited now: all 31 minutes.
    assert await _minutes(client, tenant, ten) == {"covered": 31, "alice": 31, "booked": 31}


async def test_no_change_dated_into_hours_whose_raw_samples_are_gone(app, client) -> None:
    tenant, _, ten = await _scenario(app, client)
    r = await _change(
        client, tenant, {"maxSampleGapSeconds": 600, "maxSampleGapFrom": ten.isoformat()}
    )
    assert r.status_code == 200, r.text
    # Raw samples gone (as retention drops them) while the rollups stay: a change can no
    # longer be dated back into those hours, since they could not be re-judged.
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        await conn.execute("DELETE FROM host_observations WHERE workspace_id = %s", [ws])
    later = (ten + 2 * MINUTE).isoformat()
    r = await _change(client, tenant, {"maxSampleGapSeconds": 900, "maxSampleGapFrom": later})
    assert r.status_code == 409, r.text
    assert "raw samples are gone" in r.json()["detail"]
    got = (await client.get(SETTINGS.format(slug=tenant.slug), headers=tenant.auth())).json()
    assert [v["seconds"] for v in got["maxSampleGapHistory"]] == [120, 600]


async def test_the_change_is_audited_with_its_date(app, client) -> None:
    tenant = await quick_tenant(app, "gapaudit")
    at = "2026-11-01T00:00:00+00:00"
    r = await _change(client, tenant, {"maxSampleGapSeconds": 300, "maxSampleGapFrom": at})
    assert r.status_code == 200, r.text
    audit = await client.get(f"/api/v1/workspaces/{tenant.slug}/audit-log", headers=tenant.auth())
    assert audit.status_code == 200, audit.text
    entry = next(e for e in audit.json()["events"] if e["action"] == "settings.changed")
    assert entry["detail"] == {
        "max_sample_gap_seconds": 300,
        "max_sample_gap_from": "2026-11-01T00:00:00Z",
        "previous_max_sample_gap_seconds": 120,
    }


def test_the_schedule_judges_by_the_opening_instant() -> None:
    change = datetime(2026, 12, 1, tzinfo=UTC)
    gaps = GapSchedule.from_columns([None, change], [120, 900])
    assert gaps.at(to_us(change) - 1) == 120_000_000
    assert gaps.at(to_us(change)) == 900_000_000  # the change's own instant is the new value
    assert gaps.widest_us == 900_000_000
    assert gaps.current_seconds == 900
    assert GapSchedule.constant(120).at(0) == 120_000_000
    with pytest.raises(ValueError, match="one `from` per value"):
        GapSchedule.from_columns([None], [120, 300])
    with pytest.raises(ValueError, match="only the first"):
        GapSchedule.from_columns([None, None], [120, 300])


def test_a_run_is_broken_by_the_limit_at_its_opener() -> None:
    """stateSince: 200 s between two identical points continues a run only when the value
    in force at the first of them allows 200 s."""
    held = (GpuTick(1, "active", 90, 1, 2, ("alice",)),)
    change = datetime(2026, 12, 1, tzinfo=UTC)
    first, second = to_us(change) - 100_000_000, to_us(change) + 100_000_000
    ticks = [Tick(7, first, held), Tick(7, second, held)]
    before_change = GapSchedule.from_columns([None, change], [120, 300])
    assert advance(None, {}, ticks, before_change) == {1: second}  # judged by 120 s
    opened_under = GapSchedule.from_columns([None, change - timedelta(seconds=200)], [120, 300])
    assert advance(None, {}, ticks, opened_under) == {1: first}  # judged by 300 s


def _held_by(user: str) -> list[dict[str, Any]]:
    return [gpu(0, util=90, state="active", procs=[proc(user)])]


async def _figures(
    client: httpx.AsyncClient, tenant: Tenant, hour: datetime
) -> tuple[dict[str, float], float]:
    """Held GPU-hours per Linux user, and GPU-0's covered hours, in [hour, hour + 1 h)."""
    window = {"from": hour.isoformat(), "to": (hour + timedelta(hours=1)).isoformat()}
    usage = await report(client, tenant, "usage", **window, groupBy="user")
    held = {str(row["user"]): float(row["heldGpuHours"]) for row in usage["rows"]}
    util = await report(client, tenant, "utilization", **window, groupBy="gpu")
    covered = sum(float(row["coveredHours"]) for row in util["rows"])
    return held, covered


async def test_a_late_point_after_a_gap_change_never_gives_negative_or_doubled_hours(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was: an observation landing between two stored ones after `maxSampleGapSeconds`
    had changed un-credited the old interval under the *new* limit, while it had been
    credited under the old one. Raised (120 s -> 900 s) and a spooled point replayed into
    a 10-minute stretch that had been a gap: the board took back 600 s it had never
    credited, and alice's held GPU-hours came out negative (-0.116667 h). Lowered (900 s
    -> 300 s) and a late point replayed into a 10-minute interval credited under 900 s:
    nothing was taken back, the two halves were credited on top, and the GPU was covered
    0.333333 h in a 10-minute stretch. Now each interval is judged by the value in force
    at its opening observation, so the split halves of an interval opened before the
    change are judged as the whole was."""
    hour = days_ago_midnight(1) + timedelta(hours=10)
    problems: list[str] = []

    # Raised: 10:00 -> 10:10 was a gap under 120 s; then the limit is 900 s and a spooled
    # point at 10:03 (bob) is replayed into it.
    raised = await quick_tenant(app, "gapup")
    agent = (await enroll(client, raised, "spooler"))["agentToken"]
    for minutes in (0, 10):
        r = await push(client, agent, observation(hour + minutes * MINUTE, _held_by("alice")))
        assert r.status_code == 202, r.text
    await set_max_gap(client, raised, 900, since=None)  # from now: after those points
    r = await push(client, agent, observation(hour + 3 * MINUTE, _held_by("bob")))
    assert r.status_code == 202, r.text
    held, covered = await _figures(client, raised, hour)
    negative = {user: hours for user, hours in held.items() if hours < 0}
    if negative or covered < 0:
        problems.append(
            f"maxSampleGap raised, then a late point: negative held GPU-hours {negative}, "
            f"GPU-0 covered {covered} h (10 observed minutes)"
        )
    if sum(held.values()) > covered + 1e-6:
        problems.append(f"maxSampleGap raised: users held {held}, more than covered {covered} h")

    # Lowered: 10:00 -> 10:10 was credited under 900 s; then the limit is 300 s and a
    # late point at 10:05 is replayed into it.
    lowered = await quick_tenant(app, "gapdown")
    await set_max_gap(client, lowered, 900)
    agent = (await enroll(client, lowered, "replayer"))["agentToken"]
    for minutes in (0, 10):
        r = await push(client, agent, observation(hour + minutes * MINUTE, _held_by("alice")))
        assert r.status_code == 202, r.text
    await set_max_gap(client, lowered, 300, since=None)
    r = await push(client, agent, observation(hour + 5 * MINUTE, _held_by("alice")))
    assert r.status_code == 202, r.text
    held, covered = await _figures(client, lowered, hour)
    ten_minutes = 10 / 60
    # Both halves were opened under 900 s (10:00 and 10:05 are before the change): the
    # ten minutes stay covered exactly once.
    if abs(covered - ten_minutes) > 1e-6 or abs(held.get("alice", 0.0) - ten_minutes) > 1e-6:
        problems.append(
            f"maxSampleGap lowered, then a late point: GPU-0 covered {covered} h and alice "
            f"held {held.get('alice')} h of one GPU in 10 minutes (exactly {ten_minutes:.6f})"
        )
    assert not problems, "\n".join(problems)


DEADLINE = 60.0


async def test_a_max_sample_gap_from_at_the_calendars_ends_is_refused_with_a_sentence(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 500: year 1 at +14:00 or year 9999 at -12:00 is no instant Python can hold
    in UTC (OverflowError in the PATCH and in the admin form). And `0001-01-01T00:00:00Z`
    was stored: the admin page then failed for good in any zone west of UTC, as it shows
    each value's start in local time (year 0). Now a `from` must be a time from 1970 on
    (nothing is observed before), refused with a sentence otherwise."""
    acme = await make_tenant(app, "acme")
    url = SETTINGS.format(slug="acme")
    before = (await client.get(url, headers=acme.auth())).json()
    for sent in (
        "0001-01-01T00:00:00+14:00",  # before year 1 in UTC
        "9999-12-31T23:59:59-12:00",  # after year 9999 in UTC
        "0001-01-01T00:00:00Z",  # year 0 in any zone west of UTC
        "1969-12-31T23:59:59Z",
    ):
        r = await client.patch(
            url, json={"maxSampleGapSeconds": 300, "maxSampleGapFrom": sent}, headers=acme.auth()
        )
        assert r.status_code == 422, (sent, r.text)
        assert "maxSampleGapFrom must be a time" in r.json()["detail"]
    assert (await client.get(url, headers=acme.auth())).json() == before

    # The admin form reads a local time in the workspace's zone: year 1 in Tokyo (LMT
    # +09:18:59) is before year 1 in UTC.
    r = await client.patch(url, json={"timezone": "Asia/Tokyo"}, headers=acme.auth())
    assert r.status_code == 200, r.text
    await sign_in(client, "admin@acme.example")
    csrf = csrf_of((await client.get("/w/acme/admin")).text)
    form = {"csrf_token": csrf, "maxSampleGapSeconds": "300"}
    for local in ("0001-01-01T00:00", "0001-01-01T10:00"):
        r = await client.post("/w/acme/admin/settings", data=form | {"maxSampleGapFrom": local})
        assert r.status_code == 422, (local, r.text)
        assert "maxSampleGapFrom must be a time" in r.text

    # The page shows every dated value in the workspace's zone, west of UTC too.
    r = await client.patch(url, json={"timezone": "America/New_York"}, headers=acme.auth())
    assert r.status_code == 200, r.text
    page = await client.get("/w/acme/admin")
    assert page.status_code == 200
    assert [
        v["from"]
        for v in (await client.get(url, headers=acme.auth())).json()["maxSampleGapHistory"]
    ] == [None]


async def _lock_waiters(app: Any) -> int:
    found = await scalar(
        app,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()",
    )
    return int(found)


async def _until_waiting(app: Any, task: asyncio.Future[Any], waiters: int) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while await _lock_waiters(app) < waiters:
        assert not task.done(), task.result()
        assert asyncio.get_running_loop().time() < deadline, "the change never waited"
        await asyncio.sleep(0.02)


async def test_a_host_enrolled_during_a_sample_gap_change_is_judged_as_a_rebuild_judges_it(
    app: Any, client: httpx.AsyncClient, settings: Any
) -> None:
    """A back-dated change locked the hosts it knew, then read the newest observation,
    then locked the hosts again to rebuild. A host enrolled meanwhile could push, in
    between, intervals after that newest one: credited under the old value (the change
    was not committed), outside the rebuilt window, and left so."""
    tenant = await quick_tenant(app, "gaprace")
    agent = (await enroll(client, tenant, "node-a"))["agentToken"]
    ten = days_ago_midnight(1) + timedelta(hours=10)
    for minutes in (0, 1, 2, 10):
        r = await push(client, agent, observation(ten + minutes * MINUTE, _held_by("alice")))
        assert r.status_code == 202, r.text
    runtime: Runtime = app.state.runtime
    ws = await scalar(app, "SELECT id FROM workspaces WHERE slug = %s", tenant.slug)
    body = {"maxSampleGapSeconds": 1200, "maxSampleGapFrom": (ten + 5 * MINUTE).isoformat()}
    async with runtime.pool.connection() as row_holder, runtime.pool.connection() as host_holder:
        # The change locks node-a, then waits for the workspace row.
        await row_holder.execute("SELECT 1 FROM workspaces WHERE id = %s FOR NO KEY UPDATE", [ws])
        change = asyncio.ensure_future(
            client.patch(SETTINGS.format(slug=tenant.slug), json=body, headers=tenant.auth())
        )
        await _until_waiting(app, change, 1)
        # Two hosts enrolled meanwhile; the change will wait for the first one's row.
        first = await enroll(client, tenant, "node-c")
        late = (await enroll(client, tenant, "node-b"))["agentToken"]
        await host_holder.execute(
            "SELECT 1 FROM hosts WHERE public_id = %s FOR UPDATE", [first["hostId"]]
        )
        await row_holder.commit()
        await _until_waiting(app, change, 1)
        # node-b pushes 10-minute intervals today: gaps under 120 s, credited under 1200 s.
        now = datetime.now(UTC).replace(microsecond=0)
        for minutes in (30, 20, 10):
            at = now - minutes * MINUTE
            r = await push(client, late, observation(at, _held_by("bob")))
            assert r.status_code == 202, r.text
        await host_holder.commit()
        r = await change
    assert r.status_code == 200, r.text
    await _equals_a_rebuild(app, tenant, settings)
