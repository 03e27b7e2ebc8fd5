"""The fleet, people, host and usage views and the REST hosts API under hostile
parameters, as a member or an API client: conditional requests, searches, sorts,
filters and ranges, checked for right answers as well as for clean refusals.

Each holds, or was a defect found and fixed: fleet.json answered 304 with an old fragment
when an offender's holder changed on a GPU the filter did not list (the ETag named the
offenders by id only); the usage page was a 500 for through=9999-12-31 and
to=0001-01-01 (OverflowError); the host page's reservation timeline and the fleet's
?host= filter compared an upper-case or braced host id as spelled and showed nothing;
grouped by user, a Linux user named "(nobody)" was filed with the free GPUs.

In process (the app and a real PostgreSQL), not the served board.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.board.builders import Tenant, enroll, make_tenant, push
from tests.board.reservation_builders import busy_host
from tests.board.test_reports_builders import gpu, observation, proc
from tests.web.helpers import sign_in


async def signed_in(app: Any, client: httpx.AsyncClient, slug: str) -> Tenant:
    tenant = await make_tenant(app, slug)
    r = await sign_in(client, f"admin@{slug}.example")
    assert r.status_code == 303, r.text
    # A day: no host here turns stale while a slow machine runs the test.
    r = await client.patch(
        f"/api/v1/workspaces/{slug}/settings",
        json={"staleAfterSeconds": 86400},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    return tenant


async def observe(
    client: httpx.AsyncClient, agent_token: str, at: datetime, gpus: list[dict[str, Any]]
) -> None:
    r = await push(client, agent_token, observation(at, gpus))
    assert r.status_code == 202, r.text


# ---- the fleet's JSON refresh and its ETag ----------------------------------------------


async def test_an_offender_whose_holder_changed_is_not_a_304(
    app: Any, client: httpx.AsyncClient
) -> None:
    """The worst offenders are drawn with their host's name and holders; with a filter
    that lists none of their cards, a changed holder must change the ETag."""
    tenant = await signed_in(app, client, "etagoff")
    host = await enroll(client, tenant, "etag-node")
    start = datetime.now(UTC) - timedelta(seconds=40)
    held = [gpu(0, util=0, state="idle_held", procs=[proc("alicehold")])]
    await observe(client, host["agentToken"], start, held)
    url = f"/w/{tenant.slug}/fleet.json?state=idle"
    first = await client.get(url)
    assert first.status_code == 200, first.text
    assert "alicehold" in first.json()["fragments"]["counts"], first.json()["counts"]
    etag = first.headers["etag"]
    moved = [gpu(0, util=0, state="idle_held", procs=[proc("bobhold")])]
    await observe(client, host["agentToken"], start + timedelta(seconds=20), moved)
    again = await client.get(url, headers={"If-None-Match": etag})
    assert again.status_code == 200, (again.status_code, again.headers)
    assert "bobhold" in again.json()["fragments"]["counts"]


# ---- every parameter, hostile ------------------------------------------------------------

HOSTILE = [
    "",
    "%00",
    "a%00b",
    "%ff",
    "%ED%A0%80",
    "%25",
    "_",
    "\\",
    "'",
    "a_b",
    ".*",
    "[",
    "(?i)",
    "\u202ex",
    "e\u0301",
    "\uff41",  # full-width a
    "-1",
    "1.5",
    "9" * 400,
    "1e400",
    "NaN",
    "x" * 60_000,  # httpx refuses URLs past 64 KiB
]
FLEET_PARAMS = ("q", "state", "host", "sort", "group", "view")


def _encoded(value: str) -> str:
    from urllib.parse import quote

    return value if value.startswith("%") else quote(value, safe="")


def clean(r: httpx.Response, json_route: bool) -> None:
    """No 5xx; a 4xx of a JSON route has a string detail."""
    assert r.status_code < 500, (r.request.url, r.status_code, r.text[:300])
    if json_route and 400 <= r.status_code < 500:
        assert isinstance(r.json().get("detail"), str), (r.request.url, r.text[:300])


@pytest.fixture
async def fleet(app: Any, client: httpx.AsyncClient) -> tuple[Tenant, str]:
    """A signed-in admin's workspace with a host whose GPU 0 `a_b` holds idle and whose
    GPU 1 `axb` holds busy; the host's id."""
    tenant = await signed_in(app, client, "fleetparams")
    host = await enroll(client, tenant, "params-node")
    at = datetime.now(UTC) - timedelta(seconds=30)
    await observe(
        client,
        host["agentToken"],
        at,
        [
            gpu(0, util=0, state="idle_held", procs=[proc("a_b")]),
            gpu(1, util=90, state="active", procs=[proc("axb")]),
        ],
    )
    return tenant, str(host["hostId"])


async def test_every_fleet_parameter_hostile(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str]
) -> None:
    tenant, host_id = fleet
    base = f"/w/{tenant.slug}"
    for name in FLEET_PARAMS:
        for value in HOSTILE:
            for path, is_json in ((f"{base}/fleet.json", True), (f"{base}/", False)):
                r = await client.get(f"{path}?{name}={_encoded(value)}")
                clean(r, is_json)
                if r.status_code == 200 and is_json:
                    assert r.json()["counts"]["total"] == 2, (name, value[:20])
        r = await client.get(f"{base}/fleet.json?{name}=a&{name}=b")
        clean(r, True)
    for value in HOSTILE:
        for path in ("/people?sort=", f"/hosts/{host_id}?range=", f"/hosts/{host_id}.json?x="):
            r = await client.get(f"{base}{path}{_encoded(value)}")
            clean(r, path.endswith("x="))
        r = await client.get(f"{base}/hosts/{_encoded(value)}.json")
        clean(r, True)
        assert r.status_code in (400, 404, 422), (value[:20], r.status_code)


async def test_rest_hosts_parameters_hostile(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str]
) -> None:
    tenant, host_id = fleet
    base = f"/api/v1/workspaces/{tenant.slug}/hosts"
    for role in ("admin", "member", "finance"):
        for name in ("q", "sort", "limit", "cursor"):
            for value in HOSTILE:
                r = await client.get(f"{base}?{name}={_encoded(value)}", headers=tenant.auth(role))
                clean(r, True)
        for value in HOSTILE:
            r = await client.get(f"{base}/{_encoded(value)}", headers=tenant.auth(role))
            clean(r, True)
            assert r.status_code in (400, 404, 405, 422), (value[:20], r.status_code)
    r = await client.get(f"{base}/{host_id}", headers=tenant.auth("finance"))
    assert r.status_code == 200, r.text
    assert "a_b" not in r.text
    assert "axb" not in r.text


async def test_searches_match_literally_and_hide_users_from_finance(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str]
) -> None:
    """`a_b` is no pattern: it finds the GPU `a_b` holds, not the one `axb` holds; `%`,
    `.*` and `\\` find nothing; finance finds no GPU by a Linux user."""
    tenant, _ = fleet
    api = f"/api/v1/workspaces/{tenant.slug}/hosts"

    async def rest(q: str, role: str = "admin") -> list[int]:
        r = await client.get(f"{api}?q={_encoded(q)}", headers=tenant.auth(role))
        assert r.status_code == 200, r.text
        return [g["index"] for h in r.json()["hosts"] for g in h["gpus"]]

    async def page(q: str) -> list[int]:
        r = await client.get(f"/w/{tenant.slug}/fleet.json?q={_encoded(q)}")
        assert r.status_code == 200, r.text
        return [g["index"] for h in r.json()["hosts"] for g in h["gpus"]]

    assert await rest("a_b") == [0]
    assert await page("a_b") == [0]
    assert await rest("A_B") == [0]
    for q in ("%", "a%b", ".*", "\\", "'", "a.b", "\uff41_b"):
        assert await rest(q) == [], q
        assert await page(q) == [], q
    assert await rest("a_b", "finance") == []
    assert await rest("axb", "finance") == []
    assert await rest("params-node", "finance") == [0, 1]


# ---- the usage page at the edges of the calendar -------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "through=9999-12-31",
        "from=9999-12-01&through=9999-12-31",
        "to=0001-01-01",
        "from=0001-01-01&to=0001-01-01",
        "through=0001-01-01",
        "to=9999-12-31&through=9999-12-31",
    ],
)
async def test_usage_bounds_at_the_edges_of_the_calendar(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str], query: str
) -> None:
    tenant, _ = fleet
    # The CSV reads `to`, not the form's `through`.
    for path in ("usage", "usage.csv") if "to=" in query else ("usage",):
        r = await client.get(f"/w/{tenant.slug}/{path}?{query}")
        assert r.status_code == 422, (path, query, r.status_code, r.text[:300])


# ---- the host page under another spelling of its id ----------------------------------------


async def test_the_host_page_under_any_spelling_of_its_id_shows_its_timeline(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str]
) -> None:
    """The page reads the host by any spelling uuid.UUID takes; its reservation timeline
    compared the spelling with the canonical id and showed no GPU for upper case."""
    tenant, host_id = fleet
    canonical = await client.get(f"/w/{tenant.slug}/hosts/{host_id}")
    assert canonical.status_code == 200, canonical.text[:300]
    assert 'data-gpu-row="GPU-0"' in canonical.text
    for spelling in (host_id.upper(), "{" + host_id + "}", host_id.replace("-", "")):
        r = await client.get(f"/w/{tenant.slug}/hosts/{spelling}")
        assert r.status_code == 200, (spelling, r.text[:300])
        assert 'data-gpu-row="GPU-0"' in r.text, spelling
        assert 'data-gpu-row="GPU-1"' in r.text, spelling


async def test_the_fleet_filter_by_host_takes_any_spelling_of_its_id(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str]
) -> None:
    tenant, host_id = fleet
    for spelling in (host_id, host_id.upper(), "{" + host_id + "}", f" {host_id} "):
        r = await client.get(f"/w/{tenant.slug}/fleet.json?host={_encoded(spelling)}")
        assert r.status_code == 200, r.text
        assert [h["hostId"] for h in r.json()["hosts"]] == [host_id], spelling
    r = await client.get(f"/w/{tenant.slug}/fleet.json?host=not-a-host")
    assert r.status_code == 200, r.text
    assert r.json()["hosts"] == []


# ---- conditional requests ---------------------------------------------------------------


async def test_forged_and_foreign_etags_are_never_a_304(
    app: Any, client: httpx.AsyncClient, fleet: tuple[Tenant, str]
) -> None:
    tenant, _ = fleet
    url = f"/w/{tenant.slug}/fleet.json"
    first = await client.get(url)
    assert first.status_code == 200, first.text
    etag = first.headers["etag"]
    # Another query's or another view's ETag is not this answer's.
    for other in ("?q=params", "?state=idle_held", "?sort=util", "?group=user", "?view=map"):
        r = await client.get(url + other, headers={"If-None-Match": etag})
        assert r.status_code == 200, (other, r.status_code)
    forged = [
        "*x",
        etag.strip('"'),
        etag[:-2] + '"',
        '"' + "0" * 32 + '"',
        ", ".join(f'"{i:032x}"' for i in range(2000)),
        "x" * 60_000,
        "\u202e" + etag[::-1],
    ]
    for value in forged:
        r = await client.get(url, headers={"If-None-Match": value.encode()})
        assert r.status_code == 200, (value[:40], r.status_code)
    # The same ETag, weak or in a list, is this answer's (a weak comparison, RFC 9110).
    for value in (etag, "W/" + etag, f'"nope", {etag}'):
        r = await client.get(url, headers={"If-None-Match": value})
        assert r.status_code in (200, 304), r.status_code
        assert r.status_code == 304 or r.headers["etag"] != etag, (value, r.headers)
    # Another workspace's admin with this ETag: its own fleet, never a 304.
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as theirs:
        other = await signed_in(app, theirs, "etagother")
        r = await theirs.get(f"/w/{other.slug}/fleet.json", headers={"If-None-Match": etag})
        assert r.status_code == 200, r.status_code
        assert r.json()["counts"]["total"] == 0
        # Nor does their ETag open this workspace's fleet to them.
        r = await theirs.get(url, headers={"If-None-Match": etag})
        assert r.status_code == 404, r.status_code


# ---- zones: half-hour, three-quarter-hour, half-hour DST, the date line -------------------

ODD_ZONES = (
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Pacific/Kiritimati",
    "America/St_Johns",
    "America/Santiago",
)


@pytest.mark.parametrize("zone", ODD_ZONES)
async def test_every_view_in_an_odd_zone(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str], zone: str
) -> None:
    tenant, host_id = fleet
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings", json={"timezone": zone}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    base = f"/w/{tenant.slug}"
    paths = [
        "/",
        "/fleet.json",
        "/people",
        "/people?sort=hours",
        "/usage",
        "/usage?groupBy=day",
        "/usage?groupBy=user,day",
        "/usage.csv",
        "/usage.csv?groupBy=day",
        f"/hosts/{host_id}.json",
        *(f"/hosts/{host_id}?range={key}" for key in ("6h", "24h", "7d", "30d")),
    ]
    for path in paths:
        r = await client.get(base + path)
        # Local days of a half-hour zone are the UTC hours that start on them (reports.md).
        assert r.status_code == 200, (zone, path, r.text[:500])


# ---- finance and the Linux users in a rejected push's detail ------------------------------


@pytest.mark.parametrize("user", ["finsecretuser" + "x" * 60, "fin\x00secret"])
async def test_finance_never_reads_a_linux_user_in_a_rejection(
    app: Any, client: httpx.AsyncClient, user: str
) -> None:
    """A push refused for its Linux user is shown to finance (the host's problems) by
    its field and reason only, on every view finance has."""
    tenant = await signed_in(app, client, "finreject")
    host = await enroll(client, tenant, "fin-node")
    body = observation(
        datetime.now(UTC) - timedelta(seconds=20), [gpu(0, util=5, procs=[proc(user)])]
    )
    r = await push(client, host["agentToken"], body)
    assert r.status_code in (400, 422), r.text
    shown = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/hosts/{host['hostId']}", headers=tenant.auth()
    )
    assert shown.json()["rejectedPushes"], shown.text
    answers = [
        await client.get(
            f"/api/v1/workspaces/{tenant.slug}/hosts{path}", headers=tenant.auth("finance")
        )
        for path in ("", f"/{host['hostId']}")
    ]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as fin:
        r = await sign_in(fin, f"finance@{tenant.slug}.example")
        assert r.status_code == 303, r.text
        for path in (
            "/",
            "/fleet.json",
            f"/hosts/{host['hostId']}",
            f"/hosts/{host['hostId']}.json",
        ):
            answers.append(await fin.get(f"/w/{tenant.slug}{path}"))
    for answer in answers:
        assert answer.status_code == 200, (answer.request.url, answer.text[:300])
        assert "secret" not in answer.text, (answer.request.url, answer.text[:3000])


@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Pacific/Pago_Pago", "Asia/Kathmandu"])
async def test_the_people_week_starts_on_the_zones_monday(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str], zone: str
) -> None:
    """Fourteen hours ahead of UTC and eleven behind, the week is the zone's own."""
    from zoneinfo import ZoneInfo

    from board.reports.params import day_now

    tenant, _ = fleet
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings", json={"timezone": zone}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text

    def monday() -> str:
        today = day_now(ZoneInfo(zone))  # the local date the current UTC hour starts on
        return (today - timedelta(days=today.weekday())).isoformat()

    before = monday()
    r = await client.get(f"/w/{tenant.slug}/people")
    after = monday()
    assert r.status_code == 200, r.text
    assert f"GPU-hours since {before}" in r.text or f"GPU-hours since {after}" in r.text
    assert "a_b" in r.text
    assert "axb" in r.text


# ---- days whose midnight the clocks skip ---------------------------------------------------

SKIPPED_MIDNIGHTS = [
    ("America/Santiago", "2026-09-06"),
    ("America/Havana", "2026-03-08"),
    ("Asia/Beirut", "2026-03-29"),
    ("America/Santiago", "2026-04-05"),  # the hour before it comes twice
]


@pytest.mark.parametrize(("zone", "day"), SKIPPED_MIDNIGHTS)
async def test_usage_around_a_day_whose_midnight_is_skipped(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str], zone: str, day: str
) -> None:
    from datetime import date

    tenant, _ = fleet
    first = date.fromisoformat(day) - timedelta(days=3)
    last = date.fromisoformat(day) + timedelta(days=3)
    for start, through in ((first, last), (date.fromisoformat(day), last), (first, first)):
        end = through + timedelta(days=1)
        tz = _encoded(zone)
        for path in (
            f"/w/{tenant.slug}/usage?from={start}&through={through}&tz={tz}&groupBy=day",
            f"/w/{tenant.slug}/usage?from={start}&through={through}&tz={tz}",
            f"/w/{tenant.slug}/usage.csv?from={start}&to={end}&tz={tz}&groupBy=day",
            f"/api/v1/workspaces/{tenant.slug}/reports/usage?from={start}&to={end}&tz={tz}",
        ):
            r = await client.get(path, headers=tenant.auth())
            assert r.status_code == 200, (path, r.status_code, r.text[:400])


# ---- sorts: the same order on every call, for every role ----------------------------------


async def test_sorts_are_right_and_repeatable_for_every_role(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await signed_in(app, client, "sorts")
    at = datetime.now(UTC) - timedelta(seconds=30)
    # Three hosts, two of them named alike; idle-held, busy and free GPUs.
    for name, gpus in (
        ("twin", [gpu(0, util=10, state="active", procs=[proc("u1")], used=9000)]),
        ("twin", [gpu(0, util=0, state="idle_held", procs=[proc("u2")], used=100)]),
        ("solo", [gpu(0, util=90, state="active", procs=[proc("u3")], used=5000), gpu(1)]),
    ):
        host = await enroll(client, tenant, name)
        await observe(client, host["agentToken"], at, gpus)
    api = f"/api/v1/workspaces/{tenant.slug}/hosts"

    async def order(sort: str, role: str) -> list[tuple[str, int]]:
        r = await client.get(f"{api}?sort={sort}", headers=tenant.auth(role))
        assert r.status_code == 200, r.text
        return [(h["displayName"], g["index"]) for h in r.json()["hosts"] for g in h["gpus"]]

    expected = {
        "idle_held": ("twin", "solo", "twin"),
        "util": ("solo", "twin", "twin"),
        "memory": ("twin", "solo", "twin"),
    }
    for role in ("admin", "member", "finance"):
        for sort, hosts in expected.items():
            first = await order(sort, role)
            assert tuple(dict.fromkeys(n for n, _ in first)) != (), first
            assert [n for n, i in first if i == 0] == list(hosts), (sort, role, first)
            for _ in range(3):
                assert await order(sort, role) == first, (sort, role)
    for sort in ("name", "idle_held", "util", "memory"):
        r = await client.get(f"/w/{tenant.slug}/fleet.json?sort={sort}")
        assert r.status_code == 200, r.text
        shown = [(h["hostId"], g["index"]) for h in r.json()["hosts"] for g in h["gpus"]]
        assert len(shown) == 4, shown
        for _ in range(2):
            again = await client.get(f"/w/{tenant.slug}/fleet.json?sort={sort}")
            assert [
                (h["hostId"], g["index"]) for h in again.json()["hosts"] for g in h["gpus"]
            ] == (shown), sort


async def test_a_user_named_like_nobody_is_not_grouped_with_free_gpus(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Grouped by user, the GPUs nobody holds were under the key "(nobody)": a Linux user
    of that name (an agent reports any) had its GPUs filed with the free ones."""
    tenant = await signed_in(app, client, "nobodyname")
    host = await enroll(client, tenant, "nobody-node")
    at = datetime.now(UTC) - timedelta(seconds=30)
    held = gpu(0, util=90, state="active", procs=[proc("(nobody)")])
    await observe(client, host["agentToken"], at, [held, gpu(1)])
    r = await client.get(f"/w/{tenant.slug}/fleet.json?group=user")
    assert r.status_code == 200, r.text
    fragment = r.json()["fragments"]["hosts"]
    assert fragment.count('<section class="group"') == 2, fragment


SPACED_GROUPS = ["user ", " user", "host, user", "team ,user", " ", "\u00a0", "gpu\t"]


async def test_usage_page_group_keys_with_spaces_are_no_500(app: Any) -> None:
    """Was a 500 (KeyError: 'day' in board/web/usage_routes.py `_label`)."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as client:
        tenant = await make_tenant(app, "spaced")
        await busy_host(app, client, tenant, "spaced-node")  # the report has rows
        r = await sign_in(client, "admin@spaced.example")
        assert r.status_code == 303, r.text
        problems = []
        for value in SPACED_GROUPS:
            r = await client.get(f"/w/{tenant.slug}/usage", params={"groupBy": value})
            if r.status_code >= 500:
                problems.append(f"groupBy={value!r}: {r.status_code} {r.text[:120]!r}")
            elif r.status_code == 200 and value.strip() in ("user", "host, user", "team ,user"):
                assert "alice" in r.text, (value, r.text[:500])
        assert not problems, "\n".join(problems)
