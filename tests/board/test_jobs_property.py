"""Any arrival order of observations and job records gives the figures (and the time
outside jobs) of the in-order stream with the final record made first, and a rebuild
from raw gives them again."""

from __future__ import annotations

import copy
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from board.reservations.rebuild import rebuild_hours
from tests.board.builders import enroll, push
from tests.board.job_builders import (
    MINUTE,
    connect,
    ids,
    job,
    job_figures,
    kind_gpu,
    outside_hours,
    record,
)
from tests.board.test_reports_builders import days_ago_midnight, observation, quick_tenant

_kind = st.sampled_from(["active", "idle_held", "foreign", "unused"])
_step = st.tuples(st.sampled_from([1, 30, 59, 119, 121, 600]), _kind, _kind)
# The job's start from the UTC midnight, and its final length (None: still running).
_SHAPES = [(-10 * MINUTE, 20 * MINUTE), (0 * MINUTE, 60 * MINUTE), (-10 * MINUTE, None)]
_ENDS = [None, 5 * MINUTE, 30 * MINUTE, 90 * MINUTE]


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_step, min_size=1, max_size=8), data=st.data())
async def test_arrival_order_and_record_time_do_not_matter(app, client, steps, data) -> None:
    tenant = await quick_tenant(app, "jprop")
    offset, length = data.draw(st.sampled_from(_SHAPES), label="job")
    start = days_ago_midnight(1) + offset
    end = None if length is None else start + length
    at = start - 3 * MINUTE
    bodies = [observation(at, [kind_gpu(0, "unused"), kind_gpu(1, "unused")])]
    for seconds, first, second in steps:
        at += timedelta(seconds=seconds)
        bodies.append(observation(at, [kind_gpu(0, first), kind_gpu(1, second)]))
    hosts = {}
    for name in ("in-order", "shuffled"):
        enrolled = await enroll(client, tenant, name)
        ws, hosts[name] = await ids(app, tenant, enrolled["hostId"])
        hosts[name + "-token"] = enrolled["agentToken"]
        r = await push(client, enrolled["agentToken"], bodies[0])
        assert r.status_code == 202
    await record(app, ws, job("1", start, end, {hosts["in-order"]: (0,)}))
    for body in bodies[1:]:
        r = await push(client, hosts["in-order-token"], body)
        assert r.status_code == 202

    # The shuffled host's job: first recorded with some other end, then with the final one.
    early_end = data.draw(st.sampled_from(_ENDS), label="first end")
    early = job(
        "2", start, None if early_end is None else start + early_end, {hosts["shuffled"]: (0,)}
    )
    final = job("2", start, end, {hosts["shuffled"]: (0,)})
    repeats = data.draw(st.lists(st.integers(1, len(bodies) - 1), max_size=3), label="repeats")
    arrival = data.draw(
        st.permutations(bodies[1:] + [copy.deepcopy(bodies[i]) for i in repeats]), label="order"
    )
    first_at = data.draw(st.integers(0, len(arrival)), label="first record after")
    final_at = data.draw(st.integers(first_at, len(arrival)), label="final record after")
    for i, body in enumerate([*arrival, None]):
        if i == first_at:
            await record(app, ws, early)
        if i == final_at:
            await record(app, ws, final)
        if body is not None:
            r = await push(client, hosts["shuffled-token"], body)
            assert r.status_code == 202, r.text

    def by_host() -> dict[str, dict[object, object]]:
        split: dict[str, dict[object, object]] = {"in-order": {}, "shuffled": {}}
        for name in split:
            for key, row in figures.items():
                if key[2] == hosts[name]:
                    split[name][(key[1], key[3], key[4])] = row
            for okey, us in outside.items():
                if okey[0] == hosts[name]:
                    split[name][okey[1:]] = us
        return split

    figures, outside = await job_figures(app, ws), await outside_hours(app, ws)
    credited = by_host()
    assert credited["shuffled"] == credited["in-order"]
    midnight = days_ago_midnight(1)
    async with await connect(app) as conn:
        async with conn.transaction():
            await rebuild_hours(
                conn, ws, midnight - timedelta(hours=2), midnight + timedelta(hours=4)
            )
    figures, outside = await job_figures(app, ws), await outside_hours(app, ws)
    assert by_host() == credited
