"""The pages over plain HTTP: sessions, CSRF, rate limiting, tenancy and roles."""

from __future__ import annotations

from board.web import admin_routes, fleet_routes, usage_routes
from tests.board.builders import enroll, example, make_tenant, push, retimed
from tests.web.helpers import PASSWORD, csrf_of, sign_in


async def test_sign_in_lands_on_the_fleet(app, client) -> None:
    await make_tenant(app, "acme")
    r = await sign_in(client, "admin@acme.example")
    assert r.status_code == 303
    assert r.headers["location"] == "/"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=lax" in cookie
    assert "Secure" not in cookie
    home = await client.get("/")
    assert home.status_code == 303
    assert home.headers["location"] == "/w/acme/"
    fleet = await client.get("/w/acme/")
    assert fleet.status_code == 200, fleet.text
    assert "No hosts yet." in fleet.text
    assert "default-src 'self'" in fleet.headers["content-security-policy"]


async def test_pages_need_a_session(app, client) -> None:
    await make_tenant(app, "acme")
    r = await client.get("/w/acme/usage?groupBy=user")
    assert r.status_code == 303
    assert r.headers["location"] == "/signin?next=%2Fw%2Facme%2Fusage%3FgroupBy%3Duser"
    assert (await client.get("/w/acme/fleet.json")).status_code == 401


async def test_wrong_password_then_rate_limited(app, client) -> None:
    await make_tenant(app, "acme")
    for _ in range(5):
        r = await sign_in(client, "admin@acme.example", "wrong-password")
        assert r.status_code == 401
        assert "Wrong email or password." in r.text
    r = await sign_in(client, "admin@acme.example", PASSWORD)
    assert r.status_code == 429
    assert int(r.headers["retry-after"]) > 0
    # Another person from the same address is not locked out.
    assert (await sign_in(client, "member@acme.example")).status_code == 303


async def test_unknown_email_is_refused_like_a_wrong_password(app, client) -> None:
    await make_tenant(app, "acme")
    r = await sign_in(client, "nobody@acme.example", PASSWORD)
    assert r.status_code == 401
    assert "Wrong email or password." in r.text


async def test_forms_need_the_csrf_token(app, client) -> None:
    await make_tenant(app, "acme")
    await sign_in(client, "admin@acme.example")
    r = await client.post("/w/acme/admin/enrollment-tokens", data={"csrf_token": "forged"})
    assert r.status_code == 403
    r = await client.post("/signout", data={})
    assert r.status_code == 403
    page = await client.get("/w/acme/admin")
    r = await client.post("/signout", data={"csrf_token": csrf_of(page.text)})
    assert r.status_code == 303
    assert (await client.get("/w/acme/")).status_code == 303


async def test_a_forged_or_foreign_cookie_is_no_session(app, client) -> None:
    await make_tenant(app, "acme")
    client.cookies.set("gua_session", "eyJ1IjoxfQ.forged.signature")
    assert (await client.get("/w/acme/")).status_code == 303


async def test_sign_in_redirects_only_to_this_board(app, client) -> None:
    await make_tenant(app, "acme")
    r = await sign_in(client, "admin@acme.example", next="//evil.example/")
    assert r.headers["location"] == "/"
    await client.post("/signout", data={"csrf_token": csrf_of((await client.get("/w/acme/")).text)})
    r = await sign_in(client, "admin@acme.example", next="/w/acme/usage")
    assert r.headers["location"] == "/w/acme/usage"


async def test_other_workspaces_are_404(app, client) -> None:
    await make_tenant(app, "acme")
    other = await make_tenant(app, "globex")
    host = await enroll(client, other, "globex-box")
    await sign_in(client, "admin@acme.example")
    for path in (
        "/w/globex/",
        "/w/globex/fleet.json",
        f"/w/globex/hosts/{host['hostId']}",
        "/w/globex/usage",
        "/w/globex/usage.csv",
        "/w/globex/admin",
    ):
        r = await client.get(path)
        assert r.status_code == 404, path
        assert "globex-box" not in r.text
    # A host of another workspace under one's own slug is 404 too.
    assert (await client.get(f"/w/acme/hosts/{host['hostId']}")).status_code == 404


async def test_finance_sees_usage_not_admin_nor_processes(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, "box")
    r = await push(client, host["agentToken"], retimed(example("observation-1.8.0-fake.json")))
    assert r.status_code == 202
    await sign_in(client, "finance@acme.example")
    assert (await client.get("/w/acme/admin")).status_code == 403
    page = await client.get(f"/w/acme/hosts/{host['hostId']}")
    assert page.status_code == 200
    assert "Process details are not shown to the finance role." in page.text
    data = (await client.get(f"/w/acme/hosts/{host['hostId']}.json")).json()
    assert all(g["holders"] is None for g in data["gpus"])
    assert "linuxUser" not in str(data)
    assert (await client.get("/w/acme/usage")).status_code == 200
    assert (await client.get("/w/acme/usage.csv")).status_code == 200
    fleet = await client.get("/w/acme/fleet.json")
    assert "Held by" not in fleet.json()["fragments"]["hosts"]


async def test_every_page_route_of_another_workspace_is_404(app, client) -> None:
    """Walks every /w/{slug} route, forms included (with a valid CSRF token)."""
    await make_tenant(app, "acme")
    other = await make_tenant(app, "globex")
    host = await enroll(client, other, "globex-box")
    await sign_in(client, "admin@acme.example")
    csrf = csrf_of((await client.get("/w/acme/admin")).text)
    routers = (fleet_routes.router, usage_routes.router, admin_routes.router)
    routes = [
        (method, route.path)
        for router in routers
        for route in router.routes
        for method in sorted(getattr(route, "methods", ()) or ())
        if method != "HEAD"
    ]
    assert len(routes) >= 12
    for method, template in routes:
        path = (
            template.replace("{slug}", "globex")
            .replace("{host_id}", host["hostId"])
            .replace("{prefix}", "gua_enroll_00000000")
        )
        if method == "GET":
            r = await client.get(path)
        else:
            r = await client.post(path, data={"csrf_token": csrf, "email": "x@y.example"})
        assert r.status_code == 404, (method, template, r.status_code)
        assert "globex-box" not in r.text


async def test_admin_forms_change_settings_and_members(app, client) -> None:
    await make_tenant(app, "acme")
    await sign_in(client, "admin@acme.example")
    csrf = csrf_of((await client.get("/w/acme/admin")).text)
    form = {
        "csrf_token": csrf,
        "maxSampleGapSeconds": "300",
        "staleAfterSeconds": "0",
        "timezone": "Europe/Berlin",
        "retentionDays": "400",
    }
    refused = await client.post("/w/acme/admin/settings", data=form)
    assert refused.status_code == 422
    assert "staleAfterSeconds must be a whole number from 1 to 86400." in refused.text
    assert 'name="maxSampleGapSeconds" inputmode="numeric" value="120"' in refused.text
    saved = await client.post("/w/acme/admin/settings", data=form | {"staleAfterSeconds": "600"})
    assert saved.status_code == 303
    page = (await client.get(saved.headers["location"])).text
    assert "Workspace settings saved." in page
    assert 'value="Europe/Berlin"' in page

    bad_token = await client.post(
        "/w/acme/admin/enrollment-tokens", data={"csrf_token": csrf, "expires_in_hours": "abc"}
    )
    assert bad_token.status_code == 422
    assert "expiresInHours must be more than 0" in bad_token.text

    added = await client.post(
        "/w/acme/admin/members",
        data={
            "csrf_token": csrf,
            "email": "Lead@Acme.example",
            "role": "member",
            "password": "a-long-password",
        },
    )
    assert added.status_code == 201
    assert "gua_pat_" in added.text  # shown once
    await client.post("/signout", data={"csrf_token": csrf})
    assert (await sign_in(client, "lead@acme.example", "a-long-password")).status_code == 303
    assert (await client.get("/w/acme/admin")).status_code == 403


async def test_the_admin_form_dates_a_max_sample_gap_in_the_workspaces_zone(app, client) -> None:
    """The settings form's "from" is local time in the workspace's zone; the page lists the
    dated values, and a naive or unreadable time is refused with the model's sentence."""
    acme = await make_tenant(app, "acme")
    await client.patch(
        "/api/v1/workspaces/acme/settings", json={"timezone": "Europe/Berlin"}, headers=acme.auth()
    )
    await sign_in(client, "admin@acme.example")
    csrf = csrf_of((await client.get("/w/acme/admin")).text)
    form = {"csrf_token": csrf, "maxSampleGapSeconds": "300", "maxSampleGapFrom": "soon"}
    refused = await client.post("/w/acme/admin/settings", data=form)
    assert refused.status_code == 422
    assert "maxSampleGapFrom must be a time with its zone offset" in refused.text
    saved = await client.post(
        "/w/acme/admin/settings", data=form | {"maxSampleGapFrom": "2026-07-01T10:00"}
    )
    assert saved.status_code == 303, saved.text
    settings = (await client.get("/api/v1/workspaces/acme/settings", headers=acme.auth())).json()
    assert settings["maxSampleGapHistory"][-1] == {
        "seconds": 300,
        "from": "2026-07-01T08:00:00+00:00",  # 10:00 in Berlin's summer time
    }
    page = (await client.get(saved.headers["location"])).text
    assert "120 s from the start; 300 s from 2026-07-01 10:00" in page
    # A form that changes the zone too dates the value in the zone it sets.
    moved = form | {"maxSampleGapSeconds": "600", "maxSampleGapFrom": "2026-08-01T10:00"}
    saved = await client.post("/w/acme/admin/settings", data=moved | {"timezone": "Asia/Tokyo"})
    assert saved.status_code == 303, saved.text
    settings = (await client.get("/api/v1/workspaces/acme/settings", headers=acme.auth())).json()
    assert settings["maxSampleGapHistory"][-1]["from"] == "2026-08-01T01:00:00+00:00"


async def test_an_issued_token_says_how_to_install_and_which_url_to_use(app, client) -> None:
    """The enrollment instructions name the agents' install lines and Python, and, with no
    public URL configured, that the URL shown is only what this browser used."""
    await make_tenant(app, "acme")
    await sign_in(client, "admin@acme.example")
    csrf = csrf_of((await client.get("/w/acme/admin")).text)
    issued = await client.post("/w/acme/admin/enrollment-tokens", data={"csrf_token": csrf})
    page = issued.text
    assert "python3.12 -m pip install gpu-usage-audit" in page
    assert "Python 3.12 or newer" in page
    assert 'id="url-hint"' in page
    assert "GUA_BOARD_PUBLIC_URL" in page
    app.state.runtime.settings.public_url = "https://gpus.example.org"
    try:
        csrf = csrf_of((await client.get("/w/acme/admin")).text)
        page = (
            await client.post("/w/acme/admin/enrollment-tokens", data={"csrf_token": csrf})
        ).text
    finally:
        app.state.runtime.settings.public_url = None
    assert "gua enroll --server-url https://gpus.example.org --enrollment-token" in page
    assert 'id="url-hint"' not in page


async def test_the_people_link_is_offered_only_to_those_who_may_see_people(app, client) -> None:
    """Finance sees no processes, so the fleet page offers it no "People" link."""
    await make_tenant(app, "acme")
    await sign_in(client, "member@acme.example")
    assert 'href="/w/acme/people"' in (await client.get("/w/acme/")).text
    client.cookies.clear()
    await sign_in(client, "finance@acme.example")
    fleet = await client.get("/w/acme/")
    assert fleet.status_code == 200
    assert 'href="/w/acme/people"' not in fleet.text
