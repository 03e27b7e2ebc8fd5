"""Round 15 of the hunt: the dated maxSampleGap, notices, and SSO, as an attacker.

Found and fixed:
- A `maxSampleGapFrom` at the ends of the calendar was a 500: year 1 at +14:00 or year
  9999 at -12:00 is no instant Python can hold in UTC (OverflowError in the PATCH and in
  the admin form, where a local time in year 1 of an eastern zone is the same thing).
  And `0001-01-01T00:00:00Z` was stored: the admin page then failed for good (a 500) in
  any zone west of UTC, as it shows each value's start in local time (year 0). Now a
  `from` must be a time from 1970 on (nothing is observed before), refused with a
  sentence otherwise.

Attacks that held (no test): odd but valid offsets (+23:59, +00:00:30), nanoseconds,
ISO week dates, `23:59:60`, `24:00` offsets, strings of 100,000 characters, numbers,
lists, objects and booleans as `maxSampleGapFrom` (each a 422 with one sentence), a
`from` in the future, DST-ambiguous and non-existent local times on the admin form
(read with fold 0, shown back as stored), a member, finance or another workspace's admin
changing the setting (403/404 and nothing changed).

In process (the app and a real PostgreSQL).
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.board.builders import make_tenant
from tests.web.helpers import csrf_of, sign_in

SETTINGS = "/api/v1/workspaces/{slug}/settings"


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
