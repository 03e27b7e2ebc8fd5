"""/openapi.json says what the board does: bearer schemes, the board's error model, every
refusal, required parameters, the live stream's events; /docs and /redoc are served by the
board itself, within its CSP. (schemathesis checks the rest: test_openapi_schemathesis.py.)"""

from __future__ import annotations

import re
from typing import Any

from tests.board.builders import make_tenant

BODY_METHODS = {"post", "put", "patch", "delete"}
# Reached without a bearer token: the agent trades its enrollment token in the body, and a
# calendar app carries its secret in the feed's URL.
UNAUTHENTICATED = {
    ("post", "/agent/v1/enrollments/claim"),
    ("get", "/api/v1/calendar/reservations.ics"),
}


async def _schema(client: Any) -> dict[str, Any]:
    r = await client.get("/openapi.json")
    assert r.status_code == 200
    schema: dict[str, Any] = r.json()
    return schema


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    ]


async def test_bearer_schemes_and_no_authorization_parameter(app, client) -> None:
    schema = await _schema(client)
    schemes = schema["components"]["securitySchemes"]
    assert schemes["apiToken"]["type"] == "http"
    assert schemes["apiToken"]["scheme"] == "bearer"
    assert schemes["agentToken"]["scheme"] == "bearer"
    for method, path, operation in _operations(schema):
        names = [p["name"].lower() for p in operation.get("parameters", ())]
        assert "authorization" not in names, (method, path)
        if (method, path) in UNAUTHENTICATED:
            assert "security" not in operation, (method, path)
            continue
        wanted = "agentToken" if path.startswith("/agent/") else "apiToken"
        assert operation.get("security") == [{wanted: []}], (method, path)
        assert "401" in operation["responses"], (method, path)


async def test_every_operation_has_a_summary_and_the_boards_error_model(app, client) -> None:
    schema = await _schema(client)
    components = schema["components"]["schemas"]
    assert "HTTPValidationError" not in components  # FastAPI's 422, which the board never sends
    assert components["ValidationErrorOut"]["required"] == ["detail"]
    for method, path, operation in _operations(schema):
        assert operation.get("summary"), (method, path)
        responses = operation["responses"]
        for status in ("400", "503"):  # a NUL in the URL; the database away
            assert status in responses, (method, path, status)
        for status, response in responses.items():
            if status.startswith(("4", "5")):
                ref = response["content"]["application/json"]["schema"]["$ref"]
                model = "ValidationErrorOut" if status == "422" else "ErrorOut"
                assert ref == f"#/components/schemas/{model}", (method, path, status)
        if method in BODY_METHODS or operation.get("parameters"):
            assert "422" in responses, (method, path)
        if "requestBody" in operation:
            assert {"408", "413"} <= set(responses), (method, path)


async def test_refusals_by_role_conflict_and_limits(app, client) -> None:
    paths = (await _schema(client))["paths"]
    workspace = "/api/v1/workspaces/{slug}"
    # Every role but scheduler may read hosts (403 for a scheduler's token); only admins
    # revoke them; the jobs: a node's agent or a scheduler posts, readers and it list.
    assert "403" in paths[f"{workspace}/hosts"]["get"]["responses"]
    assert "403" in paths[f"{workspace}/hosts/{{host_id}}/revoke"]["post"]["responses"]
    assert "403" in paths[f"{workspace}/jobs"]["post"]["responses"]
    assert "403" not in paths[f"{workspace}/jobs"]["get"]["responses"]  # every role
    assert "403" not in paths["/agent/v1/jobs"]["post"]["responses"]
    assert "403" in paths[f"{workspace}/hosts/{{host_id}}/revoke"]["post"]["responses"]
    assert "404" in paths[f"{workspace}/hosts"]["get"]["responses"]  # another workspace's
    assert "409" in paths[f"{workspace}/reservations"]["post"]["responses"]
    assert "409" in paths["/api/v1/me/api-tokens"]["post"]["responses"]
    assert "404" in paths["/api/v1/me/api-tokens/{token_prefix}"]["delete"]["responses"]
    assert {"401", "415"} <= set(paths["/agent/v1/enrollments/claim"]["post"]["responses"])
    assert "404" in paths["/api/v1/calendar/reservations.ics"]["get"]["responses"]
    usage = paths[f"{workspace}/reports/usage"]["get"]["responses"]
    assert "Retry-After" in usage["429"]["headers"]
    assert "WWW-Authenticate" in usage["401"]["headers"]
    ics = paths[f"{workspace}/reservations.ics"]["get"]["responses"]["200"]
    assert "text/calendar" in ics["content"]


async def test_required_parameters_are_declared_required(app, client) -> None:
    paths = (await _schema(client))["paths"]

    def required(path: str, method: str) -> set[str]:
        parameters = paths[path][method].get("parameters", ())
        return {p["name"] for p in parameters if p.get("required")}

    workspace = "/api/v1/workspaces/{slug}"
    for report in ("reports/usage", "reports/utilization", "reports/reservations"):
        assert {"from", "to"} <= required(f"{workspace}/{report}", "get"), report
    assert {"from", "to"} <= required(f"{workspace}/reports/focus", "get")
    assert {"date", "table"} <= required("/agent/v1/archives", "post")
    assert "olderThanDays" in required("/agent/v1/archives", "delete")
    # The bookings list has a default window.
    assert "from" not in required(f"{workspace}/reservations", "get")
    assert {"from", "to"} <= required(f"{workspace}/jobs", "get")


async def test_a_missing_bound_keeps_its_sentence(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    for params, named in (({"to": "2026-11-02"}, "from"), ({"from": "2026-11-01"}, "to")):
        r = await client.get(
            "/api/v1/workspaces/acme/reports/usage", params=params, headers=tenant.auth()
        )
        assert r.status_code == 422, r.text
        assert r.json()["detail"].startswith(f"{named} is required: a date (2026-11-01)")


async def test_the_stream_declares_its_events(app, client) -> None:
    paths = (await _schema(client))["paths"]
    ok = paths["/api/v1/workspaces/{slug}/stream"]["get"]["responses"]["200"]
    events = ok["content"]["text/event-stream"]["itemSchema"]["oneOf"]
    assert [e["properties"]["event"]["const"] for e in events] == ["hello", "util"]
    sample = events[1]["properties"]["data"]["contentSchema"]
    assert {"hostId", "ts", "gpus"} <= set(sample["required"])


async def test_the_fleet_stream_declares_its_frames(app, client) -> None:
    paths = (await _schema(client))["paths"]
    ok = paths["/api/v1/workspaces/{slug}/stream/fleet"]["get"]["responses"]["200"]
    events = ok["content"]["text/event-stream"]["itemSchema"]["oneOf"]
    assert [e["properties"]["event"]["const"] for e in events] == ["hello", "frame"]
    frame = events[1]["properties"]["data"]["contentSchema"]
    assert list(frame["properties"]) == ["seq", "key", "t", "hosts", "rows"]
    row = frame["properties"]["rows"]["items"]
    assert (row["type"], row["minItems"], row["maxItems"]) == ("array", 4, 4)
    assert row["description"].startswith("[index, ageMs, [utilPct, …], [memoryUsedMb, …]]")


async def test_a_405_allows_every_method_of_the_resource(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    for path, allowed in (
        ("/api/v1/me/api-tokens", "GET, POST"),
        ("/api/v1/workspaces/acme/members", "GET, POST"),
        ("/api/v1/workspaces/acme/calendar-feed", "DELETE, POST"),
        ("/api/v1/workspaces/acme/reservations/x", "DELETE, GET, PATCH"),
        ("/api/v1/workspaces/acme/members/a@b.example/sign-out", "POST"),
    ):
        r = await client.request("PUT", path, headers=tenant.auth())
        assert r.status_code == 405, (path, r.text)
        assert r.headers["allow"] == allowed, path
        assert isinstance(r.json()["detail"], str)
    # DELETE of …/x/sign-out is no removal of a member "x/sign-out".
    r = await client.delete("/api/v1/workspaces/acme/members/x/sign-out", headers=tenant.auth())
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == "POST"


async def test_the_audit_log_takes_only_times_with_an_offset(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    log = "/api/v1/workspaces/acme/audit-log"
    for bad in ("0.5", "1764547200", "2026-12-01", "2026-12-01T00:00:00", "now"):
        r = await client.get(log, params={"to": bad}, headers=tenant.auth())
        assert r.status_code == 422, (bad, r.text)
        assert (
            r.json()["detail"] == "'to' must be a time with a UTC offset, e.g. 2026-12-02T00:00Z."
        )
    for good in ("2026-12-01T00:00Z", "2026-12-01 00:00:00+01:00", "2026-12-01t00:00:00.5z"):
        r = await client.get(log, params={"to": good}, headers=tenant.auth())
        assert r.status_code == 200, (good, r.text)
    cursor = (await _schema(client))["paths"]["/api/v1/workspaces/{slug}/audit-log"]["get"]
    pattern = next(p for p in cursor["parameters"] if p["name"] == "cursor")["schema"]["pattern"]
    assert re.fullmatch(pattern, "9223372036854775807")
    assert not re.fullmatch(pattern, "9223372036854775808")


async def test_the_api_docs_are_served_by_the_board(app, client) -> None:
    for page, asset in (("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")):
        r = await client.get(page)
        assert r.status_code == 200
        csp = r.headers["content-security-policy"]
        for directive in ("default-src 'none'", "script-src 'self';", "frame-ancestors 'none'"):
            assert directive in csp, csp
        assert "unsafe-eval" not in csp
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", r.text, re.S)
        assert [body.strip() for _, body in scripts] == ["", ""]  # no inline script
        sources = re.findall(r'<script src="([^"]+)">', r.text)
        assert sources == [f"/static/apidocs/{asset}", "/static/apidocs.js"]
        assert "http" not in r.text.replace("http-equiv", "")  # nothing from another origin
        for source in sources:
            served = await client.get(source)
            assert served.status_code == 200, source
            assert "javascript" in served.headers["content-type"]
    assert (await client.get("/static/apidocs/swagger-ui.css")).status_code == 200
