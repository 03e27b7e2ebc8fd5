"""Round 12 of the hunt: accounting integrity under a hostile or broken agent, and what one
workspace can cost another.

Fixed since (dated maxSampleGap, docs/accounting.md): an observation landing between two
stored ones after the workspace's `maxSampleGapSeconds` had changed un-credited the old
interval under the *new* limit, while it had been credited under the old one. Raised
(120 s -> 900 s, as an operator of 5-minute agents would) and a spooled point replayed
into a 10-minute stretch that had been a gap: the board took back 600 s it had never
credited, and alice's held GPU-hours came out negative (-0.116667 h in the usage
report). Lowered (900 s -> 300 s) and a late point replayed into a 10-minute interval
credited under 900 s: nothing was taken back, the two halves were credited on top, and
the GPU was covered 0.333333 h in a 10-minute stretch. Now each interval is judged by the
value in force at its opening observation, so the split halves of an interval opened
before the change are judged as the whole was.

Attacks that held (no test): the same GPU UUIDs on two hosts of one workspace and of
two workspaces, UUIDs appearing and vanishing between pushes, a GPU index reused by
another UUID, duplicate pushes (same observedAt, other content) in one batch and across
batches, points exactly on hour and day boundaries and 1 µs either side, observedAt
jumping back and forth by up to 1.5 h, ok/partial/error mixes, `unknown` and graphics
processes, bookings in force on some GPUs, compaction of closed days between pushes:
the in-transaction rollups and reservation figures of both workspaces equal
`gua-board rollups rebuild` to the microsecond (with an unchanged maxSampleGap).

In process (the app and a real PostgreSQL).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx

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

MINUTE = timedelta(minutes=1)


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
