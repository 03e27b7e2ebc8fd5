"""A workspace's settings (PATCH …/settings and the admin page's form): each refusal
one sentence naming the setting, nothing changed; the zone is an IANA zone, not a copy
of one in the zone folder (right/…, posix/…, localtime), nor a folder or a file of it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx

from tests.board.answers import refused
from tests.board.builders import JSON, make_tenant
from tests.board.test_reports_builders import quick_tenant
from tests.web.helpers import csrf_of, sign_in

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


async def test_settings_validation(app, client) -> None:
    acme = await make_tenant(app, "acme")
    for bad in (
        {"timezone": "Mars/Base"},
        {"maxSampleGapSeconds": 0},
        {"unknown": 1},
        {"staleAfterSeconds": "90"},
        {"retentionDays": True},
    ):
        r = await client.patch("/api/v1/workspaces/acme/settings", json=bad, headers=acme.auth())
        assert r.status_code == 422, bad
        assert isinstance(r.json()["detail"], str)
    good = await client.patch(
        "/api/v1/workspaces/acme/settings",
        json={"timezone": "Europe/Berlin", "maxSampleGapSeconds": 600},
        headers=acme.auth(),
    )
    assert good.status_code == 200
    history = good.json().pop("maxSampleGapHistory")
    assert [value["seconds"] for value in history] == [120, 600]
    assert history[0]["from"] is None  # the first value holds from the beginning
    assert {k: v for k, v in good.json().items() if k != "maxSampleGapHistory"} == {
        "maxSampleGapSeconds": 600,
        "staleAfterSeconds": 90,
        "timezone": "Europe/Berlin",
        "retentionDays": 400,
        "maxGpusPerHost": 64,
        "maxReservationDays": 14,
        "idleHeldNoticeMinutes": 30,
        "reservationIdleNoticeMinutes": 30,
        "digestHour": None,
        "hotTemperatureC": 85,
        "jobIdleNoticeMinutes": 60,
        "jobIdleEscalateMinutes": 105,
    }


async def test_settings_refusals_name_the_setting(app, client) -> None:
    """One sentence per refusal, naming the first bad setting in the order sent; nothing
    of a refused patch is applied."""
    acme = await make_tenant(app, "acme")
    cases = [
        ({"unknown": 1, "other": 2, "timezone": "Nope"}, "Unknown setting(s): other, unknown."),
        ({"max_sample_gap_seconds": 60}, "Unknown setting(s): max_sample_gap_seconds."),
        ({"timezone": None}, "timezone None is not an IANA time zone."),
        ({"timezone": 5}, "timezone 5 is not an IANA time zone."),
        ({"retentionDays": None}, "retentionDays must be a whole number from 1 to 3650."),
        ({"maxGpusPerHost": 1.5}, "maxGpusPerHost must be a whole number from 1 to 4096."),
        (
            {"retentionDays": 30, "staleAfterSeconds": 0, "timezone": "Nope"},
            "staleAfterSeconds must be a whole number from 1 to 86400.",
        ),
        (
            {"retentionDays": 30, "timezone": "Nope", "staleAfterSeconds": 0},
            "timezone 'Nope' is not an IANA time zone.",
        ),
    ]
    for body, sentence in cases:
        r = await client.patch("/api/v1/workspaces/acme/settings", json=body, headers=acme.auth())
        assert r.status_code == 422, body
        assert r.json()["detail"] == sentence
    for body in ([], "x"):
        r = await client.patch("/api/v1/workspaces/acme/settings", json=body, headers=acme.auth())
        assert r.status_code == 422
        assert isinstance(r.json()["detail"], str)
    unchanged = await client.get("/api/v1/workspaces/acme/settings", headers=acme.auth())
    assert unchanged.json()["retentionDays"] == 400
    empty = await client.patch("/api/v1/workspaces/acme/settings", json={}, headers=acme.auth())
    assert empty.json() == unchanged.json()


async def test_settings_form_refuses_what_is_no_number(app, client) -> None:
    """The admin page's form: digits int() cannot read, or too many of them, are a 422
    with the setting's sentence (they were a 500), and nothing is saved."""
    await make_tenant(app, "acme")
    await sign_in(client, "admin@acme.example")
    csrf = csrf_of((await client.get("/w/acme/admin")).text)
    for value in ("²", "9" * 5000, "-5", "1e3", " "):
        form = {"csrf_token": csrf, "staleAfterSeconds": value, "timezone": "Europe/Berlin"}
        r = await client.post("/w/acme/admin/settings", data=form)
        assert r.status_code == 422, value
        assert "staleAfterSeconds must be a whole number from 1 to 86400." in r.text
    page = (await client.get("/w/acme/admin")).text
    assert 'name="timezone" value="UTC"' in page
