"""Any arrival order, with the booking made before, during or after the data, gives the
figures of the in-order stream with the booking made first: for partial hours and for
hours wholly inside the booking (kept in different tables) alike."""

from __future__ import annotations

import copy
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.board.builders import enroll, push
from tests.board.reservation_builders import MINUTE, book_at, reservation_report, segment_gpu
from tests.board.test_reports_builders import days_ago_midnight, observation, quick_tenant

_kind = st.sampled_from(["used", "idle_held", "conflict", "unused"])
_step = st.tuples(st.sampled_from([1, 30, 59, 119, 121, 600]), _kind)
# A booking's (start from the UTC midnight, length).
_SHAPES = [(-10 * MINUTE, 20 * MINUTE), (0 * MINUTE, 60 * MINUTE), (-10 * MINUTE, 80 * MINUTE)]


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_step, min_size=1, max_size=8), data=st.data())
async def test_arrival_order_and_booking_time_do_not_matter(app, client, steps, data) -> None:
    tenant = await quick_tenant(app, "rprop")
    # Across midnight inside two partial hours (reservation_hour_figures), one whole hour
    # (the GPU-hour row's booked sums), or a whole hour between two partial ones.
    offset, length = data.draw(st.sampled_from(_SHAPES), label="booking")
    start = days_ago_midnight(1) + offset
    end = start + length
    bodies = [observation(start - 3 * MINUTE, [segment_gpu("unused")])]
    at = start - 3 * MINUTE
    for seconds, kind in steps:
        at += timedelta(seconds=seconds)
        bodies.append(observation(at, [segment_gpu(kind)]))
    hosts = {}
    for name in ("in-order", "shuffled"):
        hosts[name] = await enroll(client, tenant, name)
        first = await push(client, hosts[name]["agentToken"], bodies[0])
        assert first.status_code == 202
    booking = {"start": start.isoformat(), "end": end.isoformat(), "linuxUsers": ["alice"]}
    await book_at(app, tenant, start, hostId=hosts["in-order"]["hostId"], **booking)
    for body in bodies[1:]:
        assert (await push(client, hosts["in-order"]["agentToken"], body)).status_code == 202

    repeats = data.draw(st.lists(st.integers(1, len(bodies) - 1), max_size=3), label="repeats")
    arrival = data.draw(
        st.permutations(bodies[1:] + [copy.deepcopy(bodies[i]) for i in repeats]), label="order"
    )
    book_after = data.draw(st.integers(0, len(arrival)), label="booked after")
    for i, body in enumerate([*arrival, None]):
        if i == book_after:
            await book_at(app, tenant, start, hostId=hosts["shuffled"]["hostId"], **booking)
        if body is not None:
            r = await push(client, hosts["shuffled"]["agentToken"], body)
            assert r.status_code == 202, r.text

    window = {
        "from": (start.replace(minute=0) - timedelta(hours=1)).isoformat(),
        "to": (start.replace(minute=0) + timedelta(hours=3)).isoformat(),
    }
    for group in ("host", "day"):
        body = await reservation_report(client, tenant, groupBy=group, **window)
        if group == "host":
            rows = {
                r["displayName"]: {k: v for k, v in r.items() if k not in ("hostId", "displayName")}
                for r in body["rows"]
            }
            assert rows["shuffled"] == rows["in-order"]
