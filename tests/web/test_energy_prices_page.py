"""The electricity and carbon page over plain HTTP: admins add and replace dated values
with its forms, refusals are drawn again with the sentence, members and finance read."""

from __future__ import annotations

from datetime import date, timedelta

from tests.board.builders import make_tenant
from tests.web.helpers import browser, csrf_of, sign_in

PAGE = "/w/kwh/energy-prices"


async def test_admins_set_prices_and_intensity_others_read(app, client) -> None:
    tenant = await make_tenant(app, "kwh")
    assert (await sign_in(client, "admin@kwh.example")).status_code == 303
    page = await client.get(PAGE)
    assert page.status_code == 200, page.text
    assert "Choose the workspace's currency" in page.text
    assert 'id="energy-price-form"' not in page.text
    token = csrf_of(page.text)
    r = await client.put(
        "/api/v1/workspaces/kwh/prices",
        json={"currency": "EUR", "prices": []},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text

    today = date.fromisoformat((await client.get(PAGE)).text.split('placeholder="', 2)[2][:10])
    later = (today + timedelta(days=3)).isoformat()
    r = await client.post(PAGE, data={"csrf_token": token, "per_kwh": "0.28", "from": later})
    assert r.status_code == 303, r.text
    assert r.headers["location"].endswith("/energy-prices?notice=price#price")
    # The same date again replaces it; another date adds one.
    r = await client.post(PAGE, data={"csrf_token": token, "per_kwh": "0.31", "from": later})
    assert r.status_code == 303, r.text
    r = await client.post(
        "/w/kwh/carbon-intensity",
        data={"csrf_token": token, "grams_per_kwh": "350", "from": today.isoformat()},
    )
    assert r.status_code == 303, r.text
    api = await client.get("/api/v1/workspaces/kwh/energy-prices", headers=tenant.auth())
    assert [(p["from"], p["perKWh"]) for p in api.json()["prices"]] == [(later, 0.31)]
    api = await client.get("/api/v1/workspaces/kwh/carbon-intensity", headers=tenant.auth())
    assert [(v["from"], v["gramsPerKWh"]) for v in api.json()["values"]] == [
        (today.isoformat(), 350.0)
    ]

    shown = (await client.get(PAGE)).text
    assert f'<tr data-from="{later}" data-state="upcoming">' in shown
    assert ">0.31</td>" in shown
    assert f'<tr data-from="{today.isoformat()}" data-state="open" data-in-force>' in shown
    assert "<strong>350</strong>" in shown

    # A refusal: the page again, with the sentence and the form as it was sent.
    r = await client.post(PAGE, data={"csrf_token": token, "per_kwh": "-1", "from": later})
    assert r.status_code == 422
    assert 'id="energy-error"' in r.text
    assert 'value="-1"' in r.text
    r = await client.post(
        "/w/kwh/carbon-intensity",
        data={"csrf_token": token, "grams_per_kwh": "300", "from": "2026-13-01"},
    )
    assert r.status_code == 422
    assert 'id="energy-error"' in r.text
    # Without the form's token nothing changes.
    r = await client.post(PAGE, data={"per_kwh": "9", "from": later})
    assert r.status_code == 403

    for role in ("member", "finance"):
        reader = browser(app)
        assert (await sign_in(reader, f"{role}@kwh.example")).status_code == 303
        seen = await reader.get(PAGE)
        assert seen.status_code == 200, seen.text
        assert "<strong>350</strong>" in seen.text
        assert '<form method="post" action="/w/kwh/energy-prices"' not in seen.text
        assert 'id="carbon-form"' not in seen.text
        assert "Only admins change them." in seen.text
        r = await reader.post(
            PAGE, data={"csrf_token": csrf_of(seen.text), "per_kwh": "9", "from": later}
        )
        assert r.status_code in (403, 404), r.text
