"""Tenant isolation: every route, called by workspace A's people and agent with B's ids.

The routes are discovered at run time (tests/security/routes.py), every path parameter and
every workspace-, host- or token-naming query or form field is filled with workspace B's
values, and each route is called with A's admin, member and finance tokens, their signed-in
cookies (with their own CSRF token), A's agent token, and nobody. The answer must be a
refusal (401/403/404/405, or the sign-in redirect of a page), never a 2xx with B's data,
never a 500, and its body must hold none of B's names and no token secret.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
import websockets

from tests.security.conftest import World
from tests.security.routes import Endpoint, discover
from tests.security.seed import observation, push
from tests.support.live import LiveBoard
from tests.support.replies import Reply

REFUSED = {401, 403, 404, 405}
_TODAY = datetime.now(UTC).date()
WINDOW = {
    "from": (_TODAY - timedelta(days=2)).isoformat(),
    "to": (_TODAY + timedelta(days=1)).isoformat(),
}
ROLES = ("admin", "member", "finance")
# Path parameters that name something inside the URL's workspace, not one of B's rows.
NOT_IDS = {"linuxuser", "validfrom", "gpumodel", "team", "account"}


@dataclass
class Identity:
    name: str
    client: httpx.Client
    csrf: str | None = None
    agent: bool = False


@dataclass
class Call:
    endpoint: Endpoint
    url: str
    body: dict[str, Any] = field(default_factory=dict)
    form: dict[str, str] | None = None
    # Whether a path parameter carries one of B's ids (then A's own slug does not help).
    b_in_path: bool = True
    all_b: bool = True

    def request_text(self) -> str:
        return self.url + json.dumps(self.body) + json.dumps(self.form or {})


def _norm(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def b_values(name: str, world: World, *, in_path: bool) -> list[str] | None:
    """B's values for a parameter, by its name; None when the name means nothing to us."""
    n = _norm(name)
    b = world.b
    if n in ("slug", "workspace", "workspaceslug"):
        return [b.slug]
    if n in ("hostid", "host"):
        return [b.hosts[0].host_id]
    if "prefix" in n:
        found = [world.b_enrollment_prefix, world.b_pat_prefix, b.hosts[0].prefix]
        return [p for p in found if p]
    if n in ("linuxuser", "user"):
        return [world.b_names[1]]
    if n == "reservationid":
        return [world.b_reservation_id]
    if n == "channelid":
        return [world.b_channel_id]
    if n == "deliveryid":
        return [world.b_delivery_id]
    # A price's date and GPU model name a price in the URL's workspace, nobody's id.
    if n == "validfrom":
        return [_TODAY.isoformat()]
    if n == "gpumodel":
        return ["swept-model"]
    # A team is a name in the URL's workspace's directory (budgets, contacts), no id; so
    # is a Slurm account (the directory's account map).
    if n == "team" and in_path:
        return ["swept-team"]
    if n == "account" and in_path:
        return ["swept-account"]
    if n == "email" and in_path:  # a form's email is a sign-in or a new member, not an id
        return [b.admin.email]
    if in_path:  # an id we do not know yet: B's host id is at least a real id of B's
        return [b.hosts[0].host_id]
    return None


def _sample(name: str) -> Any:
    n = _norm(name)
    if n == "email":
        return "swept-person@alpha.example"
    if n == "role":
        return "member"
    if "password" in n:
        return "swept-password-123"
    if n.endswith(("hours", "seconds", "days", "count")):
        return 1
    if n in ("start", "end"):  # a valid booking time, so only the ids decide the answer
        soon = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(hours=3)
        return (soon + timedelta(hours=1 if n == "end" else 0)).isoformat()
    if n == "memberemail":
        return None
    return "swept"


def calls_for(endpoint: Endpoint, world: World) -> Iterator[Call]:
    """All-B fillings (one per candidate of an ambiguous field), then A's slug with B's ids."""
    slots: list[tuple[str, str, list[str]]] = []  # (where, name, candidates)
    for name in endpoint.path_params:
        values = b_values(name, world, in_path=True)
        assert values, f"no value of B's for {name} in {endpoint}"
        slots.append(("path", name, values))
    for where, names in (
        ("query", endpoint.query),
        ("form", endpoint.form),
        ("json", endpoint.json_fields),
    ):
        for name in names:
            values = b_values(name, world, in_path=False)
            if values:
                slots.append((where, name, values))
    if not slots:
        return
    mixes = [True]
    if any(_norm(n) in ("slug", "workspace") for _, n, _ in slots) and len(slots) > 1:
        mixes.append(False)
    for all_b in mixes:
        for chosen in itertools.product(*(values for _, _, values in slots)):
            path, query, form, body = endpoint.path, {}, {}, {}
            b_in_path = False
            for (where, name, _), value in zip(slots, chosen, strict=True):
                if not all_b and _norm(name) in ("slug", "workspace"):
                    value = world.a.slug
                elif not all_b and _norm(name) == "linuxuser":
                    value = world.a_linux_user  # in A's own directory: A's own name
                elif where == "path" and _norm(name) not in NOT_IDS:
                    # A Linux user name is nobody's id: A may enter any name in A's own
                    # directory (entered ahead); only B's slug makes it B's.
                    b_in_path = True
                if where == "path":
                    # {name} or {name:path}: the converter is part of the template.
                    slot = re.compile(r"\{" + re.escape(name) + r"(?::[^}]+)?\}")
                    path = slot.sub(quote(value, safe=""), path)
                elif where == "query":
                    query[name] = value
                elif where == "form":
                    form[name] = value
                else:
                    body[name] = value
            for name in endpoint.query:  # a report needs a window to show anything
                if _norm(name) in WINDOW:
                    query.setdefault(name, WINDOW[_norm(name)])
            for name in endpoint.form:
                form.setdefault(name, _sample(name))
            for name in endpoint.json_fields:
                if name != "*":
                    body.setdefault(name, _sample(name))
            url = path + (f"?{urlencode(query)}" if query else "")
            yield Call(endpoint, url, body, form if endpoint.is_page else None, b_in_path, all_b)


def send(board: LiveBoard, who: Identity, call: Call) -> Reply:
    kw: dict[str, Any] = {}
    method = call.endpoint.method
    if method in ("POST", "PUT", "PATCH", "DELETE"):
        if call.endpoint.is_page:
            form = dict(call.form or {})
            if who.csrf:
                form["csrf_token"] = who.csrf
            kw["data"] = form
        elif call.endpoint.has_json_body:
            kw["json"] = call.body
    return board.call(who.client, method, call.url, max_bytes=2 * 1024 * 1024, **kw)


def problems_of(reply: Reply, call: Call, world: World) -> list[str]:
    found = []
    if reply.status_code >= 500:
        found.append(f"{reply.status_code}")
    elif call.all_b or call.b_in_path:
        refused = reply.status_code in REFUSED or (
            reply.status_code == 303 and reply.headers.get("location", "").startswith("/signin")
        )
        if call.endpoint.is_page and reply.status_code == 303 and not call.b_in_path:
            # /workspaces/switch?slug=B only points at B's URL, which answers 404 itself.
            refused = refused or reply.headers.get("location", "").startswith("/w/")
        if not refused:
            found.append(f"{reply.status_code} (expected 401/403/404/405)")
    asked = call.request_text()
    leaked = [n for n in world.b_names if n in reply.text and n not in asked]
    if leaked:
        found.append(f"body holds B's names {leaked}")
    return found


@pytest.fixture(scope="module")
def endpoints(board: LiveBoard, tmp_path_factory: pytest.TempPathFactory) -> list[Endpoint]:
    with board.client() as c:
        schema = board.call(c, "GET", "/openapi.json").json()
    return discover(schema, tmp_path_factory.mktemp("routes"), board.env["GUA_BOARD_DATABASE_URL"])


@pytest.fixture(scope="module")
def identities(board: LiveBoard, world: World) -> Iterator[list[Identity]]:
    made = [Identity("nobody", board.client())]
    for role in ROLES:
        person = world.a.person(role)
        made.append(Identity(f"A {role} token", board.client(person.token)))
        signed = board.signed_in_client(person.email, person.password)
        made.append(Identity(f"A {role} cookie", signed, csrf=board.csrf(signed, "/account")))
    made.append(Identity("A agent token", board.client(world.a.hosts[0].token), agent=True))
    try:
        yield made
    finally:
        for who in made:
            who.client.close()


def test_the_sweep_finds_every_kind_of_route(endpoints: list[Endpoint]) -> None:
    paths = {str(e) for e in endpoints}
    # A sanity floor, not the list: the sweep itself walks whatever exists.
    for expected in (
        "GET /api/v1/workspaces/{slug}/hosts/{host_id}",
        "POST /agent/v1/observations",
        "WS /agent/v1/stream",
        "GET /w/{slug}/admin",
        "POST /w/{slug}/admin/members",
    ):
        assert expected in paths, f"route discovery missed {expected}: {sorted(paths)}"


def test_no_route_serves_b_to_a(
    board: LiveBoard, world: World, endpoints: list[Endpoint], identities: list[Identity]
) -> None:
    problems: list[str] = []
    swept = 0
    for endpoint in endpoints:
        if endpoint.method == "WS":
            continue
        for call in calls_for(endpoint, world):
            for who in identities:
                reply = send(board, who, call)
                swept += 1
                for problem in problems_of(reply, call, world):
                    problems.append(f"{who.name}: {endpoint.method} {call.url}: {problem}")
    assert swept > 100, f"only {swept} requests: did the discovery find the routes?"
    assert not problems, f"{len(problems)} of {swept} answers:\n" + "\n".join(problems)


def test_routes_without_ids_leak_nothing_of_b(
    board: LiveBoard, world: World, endpoints: list[Endpoint], identities: list[Identity]
) -> None:
    """GET routes that name no workspace: A's own view, never B's names, never a 500."""
    problems = []
    for endpoint in endpoints:
        if endpoint.method != "GET" or any(True for _ in calls_for(endpoint, world)):
            continue
        for who in identities:
            reply = board.call(who.client, "GET", endpoint.path)
            leaked = [n for n in world.b_names if n in reply.text]
            if reply.status_code >= 500 or leaked:
                problems.append(f"{who.name}: GET {endpoint.path}: {reply.status_code} {leaked}")
    assert not problems, "\n".join(problems)


def test_websockets_refuse_people_and_strangers(
    board: LiveBoard, world: World, endpoints: list[Endpoint], identities: list[Identity]
) -> None:
    """A person's token or cookie is not an agent token: the upgrade is refused."""

    async def attempt(path: str, headers: dict[str, str]) -> str:
        url = board.url.replace("http", "ws", 1) + path
        try:
            async with websockets.connect(url, additional_headers=headers, open_timeout=30):
                return "accepted"
        except websockets.InvalidStatus as exc:
            return str(exc.response.status_code)
        except (websockets.InvalidHandshake, OSError) as exc:
            return f"refused ({type(exc).__name__})"

    problems = []
    for endpoint in (e for e in endpoints if e.method == "WS"):
        for who in identities:
            if who.agent:
                continue
            headers = dict(who.client.headers)
            headers.pop("user-agent", None)
            if who.client.cookies.get("gua_session"):
                headers["Cookie"] = f"gua_session={who.client.cookies['gua_session']}"
            outcome = asyncio.run(attempt(endpoint.path, headers))
            if outcome == "accepted" or outcome.startswith("5"):
                problems.append(f"{who.name}: WS {endpoint.path}: {outcome}")
    assert not problems, "\n".join(problems)


# ---- the agent side: A's agent token, B's ids -------------------------------------------


def _b_host(board: LiveBoard, world: World) -> dict[str, Any]:
    b = world.b
    with board.client(b.admin.token) as c:
        reply = board.call(c, "GET", f"/api/v1/workspaces/{b.slug}/hosts/{b.hosts[0].host_id}")
    assert reply.status_code == 200, reply
    host: dict[str, Any] = reply.json()
    return host


def test_a_push_naming_b_host_lands_on_a_host_only(board: LiveBoard, world: World) -> None:
    before = _b_host(board, world)
    body = observation(users=("alpha-pushes-as-b",))
    body["host"]["hostId"] = world.b.hosts[0].host_id
    body["host"]["hostname"] = world.b_names[0]
    body["host"]["displayName"] = world.b_names[0]
    reply = push(board, world.a.hosts[0], body)
    assert reply.status_code == 202, reply
    after = _b_host(board, world)
    assert after["lastSeenAt"] == before["lastSeenAt"]
    assert "alpha-pushes-as-b" not in json.dumps(after)
    with board.client(world.a.admin.token) as c:
        mine = board.call(
            c, "GET", f"/api/v1/workspaces/{world.a.slug}/hosts/{world.a.hosts[0].host_id}"
        )
    assert mine.status_code == 200, mine
    assert "alpha-pushes-as-b" in mine.text


def test_a_agent_never_sees_or_prunes_b_archives(board: LiveBoard, world: World) -> None:
    b_host = world.b.hosts[0]
    with board.client(b_host.token) as c:
        b_before = board.call(c, "GET", "/agent/v1/archives").json()
    assert b_before["archives"], "B's archives were not stored"
    with board.client(world.a.hosts[0].token) as c:
        listed = board.call(c, "GET", "/agent/v1/archives")
        pruned = board.call(c, "DELETE", "/agent/v1/archives?olderThanDays=0")
    assert listed.status_code == 200, listed
    assert listed.json()["archives"] == [], listed
    assert pruned.status_code == 200, pruned
    with board.client(b_host.token) as c:
        assert board.call(c, "GET", "/agent/v1/archives").json() == b_before


def test_tokens_of_one_kind_do_not_open_another(board: LiveBoard, world: World) -> None:
    """An agent token is not an API token, an API token is not an agent token."""
    a = world.a
    with board.client(a.hosts[0].token) as c:
        as_person = board.call(c, "GET", f"/api/v1/workspaces/{a.slug}/hosts")
    assert as_person.status_code == 401, as_person
    as_person.detail()
    for person in a.people:
        with board.client(person.token) as c:
            as_agent = board.call(
                c,
                "POST",
                "/agent/v1/observations",
                content=json.dumps(observation()).encode(),
                headers={"Content-Type": "application/json"},
            )
            archives = board.call(c, "GET", "/agent/v1/archives")
        assert as_agent.status_code == 401, as_agent
        assert archives.status_code == 401, archives


def test_b_enrollment_prefix_is_not_a_token(board: LiveBoard, world: World) -> None:
    if not world.b_enrollment_prefix:
        pytest.fail("B's pending enrollment token was not listed")
    with board.client() as c:
        reply = board.call(
            c,
            "POST",
            "/agent/v1/enrollments/claim",
            json={"enrollmentToken": world.b_enrollment_prefix, "hostname": "stolen"},
        )
    assert reply.status_code == 401, reply
    reply.detail()


def test_a_stream_never_reaches_b(board: LiveBoard, world: World) -> None:
    """A's agent streaming live samples shows them to A's people only."""
    a_host = world.a.hosts[0]

    async def stream_a_little() -> None:
        url = board.url.replace("http", "ws", 1) + "/agent/v1/stream"
        async with websockets.connect(url, additional_headers=a_host.auth, open_timeout=30) as ws:
            for _ in range(3):
                await ws.send(
                    json.dumps(
                        {
                            "type": "util",
                            "ts": 1.0e9,
                            "gpus": [{"deviceUuid": "GPU-0", "utilPct": 55, "memUsedMb": 10}],
                        }
                    )
                )
                await asyncio.sleep(0.4)

    asyncio.run(stream_a_little())
    b = world.b
    with board.client(b.admin.token) as c:
        latest = board.call(c, "GET", f"/api/v1/workspaces/{b.slug}/stream/latest")
    assert latest.status_code == 200, latest
    assert a_host.host_id not in latest.text, latest


def test_sweep_covers_new_query_fields(endpoints: list[Endpoint], world: World) -> None:
    """Fields that name a workspace or host in a query or form are filled too."""
    switch = [e for e in endpoints if e.path == "/account/api-tokens" and e.method == "POST"]
    for endpoint in switch:
        assert list(calls_for(endpoint, world)), f"{endpoint} was not swept"
