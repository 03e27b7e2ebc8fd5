"""The fleet, people, host and usage views and the REST hosts API under hostile
parameters, as a member or an API client: conditional requests, searches, sorts,
filters, groupings and ranges, checked for right answers as well as for clean refusals.
(The views in odd zones and at the calendar's edges: test_view_zones.py.)

Each holds, or was a defect found and fixed: fleet.json answered 304 with an old fragment
when an offender's holder changed on a GPU the filter did not list (the ETag named the
offenders by id only); the host page's reservation timeline and the fleet's ?host= filter
compared an upper-case or braced host id as spelled and showed nothing; grouped by user,
a Linux user named "(nobody)" was filed with the free GPUs; a usage grouping with spaces
around its keys was a 500.

In process (the app and a real PostgreSQL), not the served board.

Also attacked, and held: fleet.json's ETag after a push, a booking, a cancel, a role
change and a removal (the fingerprint names every drawn value, the role and the slug),
another workspace's or role's ETag, `If-None-Match: *`, weak and listed ETags; gzip and
identity answers both carry `Vary: Accept-Encoding` and `no-store`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.board.builders import Tenant, enroll, make_tenant, push
from tests.board.reservation_builders import busy_host
from tests.board.test_reports_builders import gpu, observation, proc
from tests.web.helpers import encoded, observe, sign_in, signed_in


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


def clean(r: httpx.Response, json_route: bool) -> None:
    """No 5xx; a 4xx of a JSON route has a string detail."""
    assert r.status_code < 500, (r.request.url, r.status_code, r.text[:300])
    if json_route and 400 <= r.status_code < 500:
        assert isinstance(r.json().get("detail"), str), (r.request.url, r.text[:300])


async def test_every_fleet_parameter_hostile(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str]
) -> None:
    tenant, host_id = fleet
    base = f"/w/{tenant.slug}"
    for name in FLEET_PARAMS:
        for value in HOSTILE:
            for path, is_json in ((f"{base}/fleet.json", True), (f"{base}/", False)):
                r = await client.get(f"{path}?{name}={encoded(value)}")
                clean(r, is_json)
                if r.status_code == 200 and is_json:
                    assert r.json()["counts"]["total"] == 2, (name, value[:20])
        r = await client.get(f"{base}/fleet.json?{name}=a&{name}=b")
        clean(r, True)
    for value in HOSTILE:
        for path in ("/people?sort=", f"/hosts/{host_id}?range=", f"/hosts/{host_id}.json?x="):
            r = await client.get(f"{base}{path}{encoded(value)}")
            clean(r, path.endswith("x="))
        r = await client.get(f"{base}/hosts/{encoded(value)}.json")
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
                r = await client.get(f"{base}?{name}={encoded(value)}", headers=tenant.auth(role))
                clean(r, True)
        for value in HOSTILE:
            r = await client.get(f"{base}/{encoded(value)}", headers=tenant.auth(role))
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
        r = await client.get(f"{api}?q={encoded(q)}", headers=tenant.auth(role))
        assert r.status_code == 200, r.text
        return [g["index"] for h in r.json()["hosts"] for g in h["gpus"]]

    async def page(q: str) -> list[int]:
        r = await client.get(f"/w/{tenant.slug}/fleet.json?q={encoded(q)}")
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
        r = await client.get(f"/w/{tenant.slug}/fleet.json?host={encoded(spelling)}")
        assert r.status_code == 200, r.text
        assert [h["hostId"] for h in r.json()["hosts"]] == [host_id], spelling
    r = await client.get(f"/w/{tenant.slug}/fleet.json?host=not-a-host")
    assert r.status_code == 200, r.text
    assert r.json()["hosts"] == []


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
