"""Names hosts and admins choose (host, Linux user, process, GPU, team, member, booking
note) holding markup are text on every page that renders them, on the served board.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest

from tests.security.seed import (
    Host,
    Person,
    Tenant,
    add_member,
    claim,
    issue_enrollment,
    new_password,
    observation,
    push,
    unique,
)
from tests.support.live import LiveBoard

MARK = "<b id=hunt>\"onx=1'"


# What must never be in an HTML page: the tag, or a quote that leaves an attribute.
RAW = ("<b id=hunt>", '"onx=1')


@dataclass
class Hostile:
    tenant: Tenant
    host: Host
    member: Person


@pytest.fixture(scope="module")
def hostile(board: LiveBoard, admin: Person, scratch: Tenant) -> Hostile:
    """Every name a page renders, chosen by an attacker: a host (its claim hostname and
    the token's display name), GPU, process, Linux user, team, member email, booking note."""
    t = scratch
    token = issue_enrollment(board, t, "name" + MARK)
    host = claim(board, token, "host" + MARK)
    body = observation(
        # Directory entries take only plain Linux user names; the team is the hostile part.
        users=("user" + MARK, "planthunt"),
        process_names=("proc" + MARK,),
        gpu_names=("gpu" + MARK,),
        gpu_uuids=("GPU-" + MARK,),
    )
    body["host"]["hostname"] = "reported" + MARK
    body["host"]["displayName"] = "shown" + MARK
    at = datetime.now(UTC)
    for when in (at - timedelta(seconds=60), at):
        body["observedAt"] = when.isoformat()
        reply = push(board, host, body)
        assert reply.status_code == 202, reply
    email = '"<b/id=hunt>"@charlie.example'
    made = add_member(board, t.slug, t.admin.token, email, "member", new_password(board))
    member_email = email if made.status_code == 201 else f"{unique('plain')}@charlie.example"
    if made.status_code != 201:
        assert add_member(board, t.slug, t.admin.token, member_email, "member", None).status_code
    base = f"/api/v1/workspaces/{t.slug}"
    start = (datetime.now(UTC) + timedelta(hours=3)).replace(second=0, microsecond=0)
    with board.client(t.admin.token) as c:
        put = board.call(
            c,
            "PUT",
            f"{base}/directory/planthunt",
            json={"memberEmail": None, "team": "team" + MARK.replace("'", "")},
        )
        booked = board.call(
            c,
            "POST",
            f"{base}/reservations",
            json={
                "hostId": host.host_id,
                "start": start.isoformat(),
                "end": (start + timedelta(hours=1)).isoformat(),
                "note": "note" + MARK,
            },
        )
    assert put.status_code < 300, put
    assert booked.status_code == 201, booked
    return Hostile(t, host, Person(member_email, "", "", "member"))


def _pages(h: Hostile) -> list[str]:
    s = f"/w/{h.tenant.slug}"
    host = f"{s}/hosts/{h.host.host_id}"
    return [
        f"{s}/",
        f"{s}/?view=dense",
        f"{s}/?view=map",
        f"{s}/?group=state",
        f"{s}/?group=user",
        f"{s}/?q={quote(MARK)}",
        f"{s}/people",
        host,
        f"{host}?range=24h",
        f"{s}/admin",
        f"{s}/admin/directory",
        f"{s}/admin/directory?saved={quote(MARK)}",
        f"{s}/admin/audit",
        f"{s}/admin/notices",
        f"{s}/reservations",
        f"{s}/reservations?host={h.host.host_id}",
        f"{s}/usage",
        f"{s}/usage?groupBy=user",
        f"{s}/usage?groupBy=team",
        f"{s}/usage?groupBy=host",
        f"{s}/usage?groupBy=gpu",
        f"{s}/usage?groupBy=user,host",
        f"{s}/statements",
        "/account",
    ]


def _fragments(value: Any) -> Iterator[str]:
    """Every string of a JSON answer whose key says it is HTML (fleet.json's fragments)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str) and ("html" in key.lower() or item.lstrip().startswith("<")):
                yield item
            else:
                yield from _fragments(item)
    elif isinstance(value, list):
        for item in value:
            yield from _fragments(item)


def test_hostile_names_are_text_on_every_page(
    board: LiveBoard, admin: Person, hostile: Hostile
) -> None:
    problems = []
    shown = 0
    with board.signed_in(admin.email, admin.password) as c:
        for path in _pages(hostile):
            reply = board.call(c, "GET", path)
            if reply.status_code != 200:
                problems.append(f"{path}: {reply}")
                continue
            for raw in RAW:
                if raw in reply.text:
                    at = reply.text.index(raw)
                    problems.append(f"{path}: raw {raw!r}: {reply.text[at - 80 : at + 40]!r}")
            shown += reply.text.count("&lt;b id=hunt&gt;")
        for path in (
            f"/w/{hostile.tenant.slug}/fleet.json",
            f"/w/{hostile.tenant.slug}/fleet.json?view=dense",
        ):
            reply = board.call(c, "GET", path)
            assert reply.status_code == 200, reply
            for fragment in _fragments(reply.json()):
                for raw in RAW:
                    if raw in fragment:
                        problems.append(f"{path}: raw {raw!r} in an HTML fragment")
    assert not problems, "\n".join(problems)
    assert shown >= 10, f"the hostile names were hardly shown ({shown}): the test proves little"
