"""Every workspace route, called with another workspace's token and ids, answers 404."""

from __future__ import annotations

import re

from tests.board.builders import enroll, example, make_tenant, push, retimed
from tests.web.helpers import csrf_of, sign_in

QUERY = "?from=2026-11-01&to=2026-11-02"


def _workspace_routes(app) -> list[tuple[str, str]]:
    """Every REST route under a workspace, as the OpenAPI schema lists them."""
    found = []
    for path, operations in app.openapi()["paths"].items():
        if path.startswith("/api/v1/workspaces/{slug}"):
            for method in sorted(operations):
                found.append((method.upper(), path))
    return found


def _fill(path: str, slug: str, ids: dict[str, str]) -> str:
    path = path.replace("{slug}", slug)
    return re.sub(r"\{(\w+)\}", lambda m: ids.get(m.group(1), "x"), path)


async def test_other_workspaces_routes_answer_404(app, client) -> None:
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    host = await enroll(client, acme, "secret-host")
    await push(client, host["agentToken"], retimed(example("observation-1.8.0-fake.json")))
    issued = await client.post(
        "/api/v1/workspaces/acme/enrollment-tokens", json={}, headers=acme.auth()
    )
    ids = {"host_id": host["hostId"], "token_prefix": issued.json()["tokenPrefix"]}
    routes = _workspace_routes(app)
    assert len(routes) >= 8  # hosts, revoke, tokens, settings, members … and whatever is added

    for role in ("admin", "member", "finance"):
        for method, path in routes:
            url = _fill(path, "acme", ids) + (QUERY if method == "GET" else "")
            r = await client.request(method, url, headers=other.auth(role), json={})
            assert r.status_code == 404, (role, method, path, r.status_code, r.text)
            assert isinstance(r.json()["detail"], str)
            assert "secret-host" not in r.text
            assert "alice" not in r.text

    # Their own slug with acme's ids: never acme's data.
    for method, path in routes:
        if method == "DELETE" or "revoke" in path or path.endswith("/stream"):
            continue  # the SSE stream of one's own workspace never ends; 404 for others above
        url = _fill(path, "other", ids) + (QUERY if method == "GET" else "")
        r = await client.request(method, url, headers=other.auth("admin"), json={})
        assert r.status_code in (200, 201, 404, 422), (method, path, r.status_code)
        assert "secret-host" not in r.text
        assert host["hostId"] not in r.text or r.status_code == 404
        if "{host_id}" in path:
            assert r.status_code == 404, (method, path)

    # acme's host is untouched (not revoked by anyone else).
    shown = await client.get(f"/api/v1/workspaces/acme/hosts/{host['hostId']}", headers=acme.auth())
    assert shown.json()["revokedAt"] is None
    tokens = await client.get("/api/v1/workspaces/acme/enrollment-tokens", headers=acme.auth())
    assert tokens.json()["enrollmentTokens"][0]["state"] == "active"


async def test_no_token_is_401(app, client) -> None:
    await make_tenant(app, "acme")
    for method, path in _workspace_routes(app):
        r = await client.request(method, _fill(path, "acme", {}) + QUERY)
        assert r.status_code == 401, (method, path)
        assert isinstance(r.json()["detail"], str)


async def test_members_and_finance_cannot_administer(app, client) -> None:
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme)
    for role in ("member", "finance"):
        h = acme.auth(role)
        assert (
            await client.post(f"/api/v1/workspaces/acme/hosts/{host['hostId']}/revoke", headers=h)
        ).status_code == 403
        assert (
            await client.get("/api/v1/workspaces/acme/enrollment-tokens", headers=h)
        ).status_code == 403
        assert (
            await client.patch(
                "/api/v1/workspaces/acme/settings", json={"retentionDays": 9}, headers=h
            )
        ).status_code == 403
        assert (
            await client.post(
                "/api/v1/workspaces/acme/members",
                json={"email": "x@y.z", "role": "admin"},
                headers=h,
            )
        ).status_code == 403
        assert (await client.get("/api/v1/workspaces/acme/settings", headers=h)).status_code == 200
    assert (await client.get("/api/v1/workspaces/acme/settings", headers=acme.auth())).json()[
        "retentionDays"
    ] == 400


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
