"""A workspace's settings (PATCH …/settings and the admin page's form): each refusal
one sentence naming the setting, nothing changed; the zone is an IANA zone, not a copy
of one in the zone folder (right/…, posix/…, localtime), nor a folder or a file of it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx

from tests.board.answers import refused
from tests.board.builders import JSON
from tests.board.test_reports_builders import quick_tenant

SETTINGS_REFUSED: list[bytes] = [
    b'{"timezone": "America"}',  # was a 500: IsADirectoryError
    b'{"timezone": "America/"}',
    b'{"timezone": "' + b"A" * 5000 + b'"}',  # was a 500: file name too long
    b'{"timezone": "UTC", "timezone": "Europe"}',  # the last one counts
    b'{"timezone": ""}',
    b'{"timezone": "\\ud800"}',
    b'{"timezone": "Europe/Berlin\\u0000"}',
    b'{"timezone": null}',
    b'{"maxSampleGapSeconds": NaN}',
    b'{"maxSampleGapSeconds": 1e309}',
    b'{"maxSampleGapSeconds": 1180591620717411303424}',
    b'{"maxSampleGapSeconds": 60.0}',
    b'{"maxSampleGapSeconds": "60"}',
    b'{"maxSampleGapSeconds": true}',
    b'{"digestHour": -0.0}',
]


async def test_settings_refuse_zone_folders_and_odd_numbers(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "zone")
    url = f"/api/v1/workspaces/{tenant.slug}/settings"
    before = (await client.get(url, headers=tenant.auth())).json()
    for body in SETTINGS_REFUSED:
        refused(await client.patch(url, content=body, headers={**tenant.auth(), **JSON}), 422)
    assert (await client.get(url, headers=tenant.auth())).json() == before
    # -0 is a whole number, and zero in JSON.
    r = await client.patch(url, content=b'{"digestHour": -0}', headers={**tenant.auth(), **JSON})
    assert r.status_code == 200, r.text
    assert r.json()["digestHour"] == 0, r.text


async def test_the_workspace_zone_is_an_iana_zone_not_a_copy_in_the_zone_folder(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 200: right/… (zoneinfo reads right/Europe/Berlin as +02:00 in December, so
    the booking form and the timeline were an hour off), posix/…, and `localtime` (the
    server's own /etc/localtime) were taken as the workspace's zone."""
    import zoneinfo

    winter = datetime(2026, 12, 4, 10, 0)
    assert zoneinfo.ZoneInfo("Europe/Berlin").utcoffset(winter) == timedelta(hours=1)
    tenant = await quick_tenant(app, "zone")
    url = f"/api/v1/workspaces/{tenant.slug}/settings"
    for zone in ("right/Europe/Berlin", "right/UTC", "posix/Europe/Berlin", "localtime"):
        r = await client.patch(url, json={"timezone": zone}, headers=tenant.auth())
        assert "IANA" in refused(r, 422), zone
    r = await client.get(url, headers=tenant.auth())
    assert r.json()["timezone"] == "UTC", r.text
    for zone in ("Europe/Berlin", "Asia/Kathmandu", "Etc/GMT-14", "EST5EDT", "Factory"):
        r = await client.patch(url, json={"timezone": zone}, headers=tenant.auth())
        assert r.status_code == 200, (zone, r.text)
        assert r.json()["timezone"] == zone
