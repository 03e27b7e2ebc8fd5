"""Round 15 of the hunt: the dated maxSampleGap, notices, and SSO, as an attacker.

Found and fixed:
- A `maxSampleGapFrom` at the ends of the calendar was a 500: year 1 at +14:00 or year
  9999 at -12:00 is no instant Python can hold in UTC (OverflowError in the PATCH and in
  the admin form, where a local time in year 1 of an eastern zone is the same thing).
  And `0001-01-01T00:00:00Z` was stored: the admin page then failed for good (a 500) in
  any zone west of UTC, as it shows each value's start in local time (year 0). Now a
  `from` must be a time from 1970 on (nothing is observed before), refused with a
  sentence otherwise.
- A host enrolled while a back-dated change ran was judged by the old value where a
  rebuild judges it by the new one. The change locked the hosts it knew, read the newest
  observation to size the window it rebuilds, then locked the hosts again: the new host
  could commit, in between, intervals after that newest one (under the old value, as
  the change was not committed yet) and they stayed so. Now the hosts are locked again
  before the newest observation is read (none is enrolled after that: the workspace row
  is held).

Attacks that held (no test): odd but valid offsets (+23:59, +00:00:30), nanoseconds,
ISO week dates, `23:59:60`, `24:00` offsets, strings of 100,000 characters, numbers,
lists, objects and booleans as `maxSampleGapFrom` (each a 422 with one sentence), a
`from` in the future, DST-ambiguous and non-existent local times on the admin form
(read with fold 0, shown back as stored), a member, finance or another workspace's admin
changing the setting (403/404 and nothing changed); the 200-value history cap (the
201st is a 409, a back-dated value superseding the rest is accepted); a PATCH whose other
setting is refused applies no gap change. Twelve PATCHes with random back-dated values
racing shuffled pushes and late points of three hosts, one booked: rollups and figures
equal a rebuild.

Read in the code only, not attacked with receivers this round: notices print host, GPU
and Linux user names, member emails and workspace names on one line in mail headers and
bodies (the templates' `finalize` also covers `join` output) and `& < >`-escaped in Slack
text (no `link_names` is sent); an email channel's addresses must read back as
themselves. SSO compares `allowed_domains` with the lower-cased domain (a trailing dot,
a subdomain or a quoted local part holding `@listed.domain` is another domain, refused).

In process (the app and a real PostgreSQL).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from board.runtime import Runtime
from tests.board.builders import enroll, make_tenant, push
from tests.board.db import scalar
from tests.board.test_reports_builders import days_ago_midnight, observation, quick_tenant
from tests.board.test_sample_gap_dated import _equals_a_rebuild
from tests.security.test_hunt_round12 import MINUTE, _held_by
from tests.web.helpers import csrf_of, sign_in

SETTINGS = "/api/v1/workspaces/{slug}/settings"
DEADLINE = 60.0


async def test_a_max_sample_gap_from_at_the_calendars_ends_is_refused_with_a_sentence(
    app: Any, client: httpx.AsyncClient
) -> None:
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
