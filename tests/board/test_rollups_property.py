"""Arrival order never changes the figures, and the incremental rollups equal a rebuild.

Also: the day rollups (kept by triggers) always equal the sum of their hours.

The series mix agents that send usageState with ones that do not, `partial`
observations (a GPU listing no process there is derived from utilization alone) and
held GPUs that name no compute process (billed to `unknown`).

Each example gets its own workspace with two hosts: one receives the generated series
in time order, once; the other a random permutation of it with repeated observations,
pushed through the agent API in concurrent groups (so the group-commit writer sees
out-of-order points inside one batch as well as across batches).
"""

from __future__ import annotations

import asyncio
import copy
from datetime import datetime, timedelta
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from board.db.urls import libpq_url
from board.rollups.rebuild import rebuild
from tests.board.builders import enroll, push
from tests.board.test_reports_builders import (
    day_rollups_mismatch,
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
    refresh_all_days,
    report,
    rollup_rows,
    workspace_id,
)

_users = st.sampled_from(["alice", "bob", "carol", "unknown"])
# Often no process at all: a held card naming nobody (billed to `unknown`), or in a
# partial observation an unreadable process list (state from utilization alone).
_procs: st.SearchStrategy[list[tuple[str, str | None]]] = st.one_of(
    st.just([]),
    st.lists(st.tuples(_users, st.sampled_from([None, "compute", "graphics"])), max_size=3),
)
# Power: a reading (energy), or none (the interval adds covered time but no energy).
_gpu = st.tuples(
    st.integers(0, 100),
    st.sampled_from([None, "active", "idle_held", "idle"]),
    _procs,
    st.one_of(st.none(), st.integers(0, 700)),
)
# Steps around the default maxSampleGap of 120 s, and some that cross hours.
_step = st.tuples(
    st.sampled_from([1, 30, 60, 119, 120, 121, 600, 1800, 3599]),
    st.integers(0, 999_999),
    st.sampled_from(["both", "both", "both", "gpu0", "error", "partial"]),
    _gpu,
    _gpu,
)
_series = st.lists(_step, min_size=1, max_size=10)


def _gpu_body(
    index: int, spec: tuple[int, str | None, list[tuple[str, str | None]], int | None]
) -> Any:
    util, state, procs, power = spec
    return gpu(index, util=util, state=state, procs=[proc(u, t) for u, t in procs], power=power)


def _bodies(steps: list[Any], base: datetime) -> list[dict[str, Any]]:
    bodies = []
    at = base
    for seconds, micros, kind, g0, g1 in steps:
        at += timedelta(seconds=seconds, microseconds=micros)
        if kind == "error":
            bodies.append(observation(at, [], agent="1.3.0", status="error"))
            continue
        if kind == "partial":
            body = observation(at, [_gpu_body(0, g0), _gpu_body(1, g1)], status="partial")
            body["errors"] = ["process_list_unavailable"]
            bodies.append(body)
            continue
        gpus = [_gpu_body(0, g0)] + ([_gpu_body(1, g1)] if kind == "both" else [])
        bodies.append(observation(at, gpus))
    return bodies


async def _named_rollups(conn: psycopg.AsyncConnection[Any], ws: int) -> dict[str, Any]:
    """Both hosts' rollups keyed by host display name and GPU uuid instead of ids."""
    cur = await conn.execute(
        """
        SELECT h.display_name, g.uuid, r.hour_start, r.covered_us, r.active_us,
               r.idle_held_us, r.idle_us, r.util_pct_us, r.memory_used_mb_us,
               r.memory_total_mb_us, r.sample_count, r.energy_covered_us, r.active_energy_uws,
               r.idle_held_energy_uws, r.idle_energy_uws
        FROM gpu_hour_rollups r
        JOIN gpus g ON g.workspace_id = r.workspace_id AND g.id = r.gpu_id
        JOIN hosts h ON h.workspace_id = r.workspace_id AND h.id = r.host_id
        WHERE r.workspace_id = %s AND r.covered_us + r.sample_count + abs(r.util_pct_us) > 0
        """,
        [ws],
    )
    gpus: dict[str, set[tuple[Any, ...]]] = {}
    for name, *rest in await cur.fetchall():
        gpus.setdefault(name, set()).add(tuple(rest))
    cur = await conn.execute(
        """
        SELECT h.display_name, g.uuid, r.linux_user, r.hour_start, r.held_us, r.active_us,
               r.idle_held_us, r.energy_held_us, r.active_energy_uws, r.idle_held_energy_uws
        FROM user_hour_rollups r
        JOIN gpus g ON g.workspace_id = r.workspace_id AND g.id = r.gpu_id
        JOIN hosts h ON h.workspace_id = r.workspace_id AND h.id = r.host_id
        WHERE r.workspace_id = %s AND (r.held_us, r.active_us, r.idle_held_us) <> (0, 0, 0)
        """,
        [ws],
    )
    users: dict[str, set[tuple[Any, ...]]] = {}
    for name, *rest in await cur.fetchall():
        users.setdefault(name, set()).add(tuple(rest))
    return {"gpus": gpus, "users": users}


def _per_host(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        rest = {k: v for k, v in row.items() if k not in ("hostId", "displayName")}
        out.setdefault(row["displayName"], []).append(rest)
    return out


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=_series, data=st.data())
async def test_any_arrival_order_gives_the_sorted_figures(app, client, steps, data) -> None:
    base = days_ago_midnight(2) - timedelta(seconds=90)  # series cross midnight often
    bodies = _bodies(steps, base)
    tenant = await quick_tenant(app, "prop")
    in_order = await enroll(client, tenant, "in-order")
    shuffled = await enroll(client, tenant, "shuffled")
    for body in bodies:
        r = await push(client, in_order["agentToken"], body)
        assert r.status_code == 202, r.text

    repeats = data.draw(st.lists(st.integers(0, len(bodies) - 1), max_size=4), label="repeats")
    arrival = data.draw(
        st.permutations(bodies + [copy.deepcopy(bodies[i]) for i in repeats]), label="arrival"
    )
    # Somewhere in the middle the maintenance computes the day rows; later pushes must
    # mark their days dirty again for the reports to stay right.
    refresh_at = data.draw(st.integers(0, len(arrival)), label="refresh at")
    i = 0
    while i < len(arrival):
        if i >= refresh_at >= 0:
            await refresh_all_days(app)
            refresh_at = -1
        size = data.draw(st.integers(1, 4), label="concurrent")
        group = arrival[i : i + size]
        answers = await asyncio.gather(*(push(client, shuffled["agentToken"], b) for b in group))
        assert all(a.status_code == 202 for a in answers), [a.text for a in answers]
        i += size

    start = base.replace(minute=0, second=0) - timedelta(hours=1)
    end = start + timedelta(days=1)
    # Two whole UTC days around the series, so reports read day rows where clean.
    wide = {
        "from": (start - timedelta(days=1)).isoformat(),
        "to": (end + timedelta(days=1)).isoformat(),
    }
    usage = await report(client, tenant, "usage", groupBy="user,host", **wide)
    by_gpu = await report(client, tenant, "usage", groupBy="gpu,day", **wide)
    util = await report(client, tenant, "utilization", groupBy="gpu", bucket="hour", **wide)
    daily = await report(client, tenant, "utilization", groupBy="gpu", bucket="day", **wide)
    for body in (usage, by_gpu, util, daily):
        hosts = _per_host(body["rows"])
        assert hosts.get("shuffled", []) == hosts.get("in-order", [])

    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url) as conn:
        ws = await workspace_id(conn, tenant.slug)
        named = await _named_rollups(conn, ws)
        for table in ("gpus", "users"):
            assert named[table].get("shuffled") == named[table].get("in-order")

        incremental = await rollup_rows(conn, ws)
        assert await day_rollups_mismatch(conn, ws) == []
        async with conn.transaction():
            await rebuild(conn, ws, start, end)
        assert await rollup_rows(conn, ws) == incremental

        # A window that starts and ends mid-series rebuilds the same hours.
        moment = datetime.fromisoformat(data.draw(st.sampled_from(bodies))["observedAt"])
        cut = moment.replace(minute=0, second=0, microsecond=0)
        async with conn.transaction():
            await rebuild(conn, ws, cut, cut + timedelta(hours=1))
        assert await rollup_rows(conn, ws) == incremental
        assert await day_rollups_mismatch(conn, ws) == []

    # Once the days are recomputed, the reports read day rows and still agree.
    await refresh_all_days(app)
    for body, params in ((usage, {"groupBy": "user,host"}), (daily, {"groupBy": "gpu"})):
        kind = "usage" if body is usage else "utilization"
        again = await report(client, tenant, kind, **params, **wide)
        assert again["rows"] == body["rows"]
