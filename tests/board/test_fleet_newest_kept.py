"""Each host's newest GPUs are kept per process between reads of the hosts list and the
fleet page (board.fleet.service), and read again exactly for the hosts that pushed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from board.fleet import latest, service
from tests.board.builders import enroll, example, make_tenant, minutes_ago, push, retimed
from tests.web.helpers import sign_in


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The host ids of each newest_gpus call."""
    calls: list[list[int]] = []
    original = latest.newest_gpus

    async def recorded(session: Any, workspace_id: int, host_ids: list[int], *a: Any) -> Any:
        calls.append(sorted(host_ids))
        return await original(session, workspace_id, host_ids, *a)

    monkeypatch.setattr(service, "newest_gpus", recorded)
    return calls


def _utils(listed: dict[str, Any]) -> dict[str, list[int | None]]:
    return {h["displayName"]: [g["utilPct"] for g in h["gpus"]] for h in listed["hosts"]}


async def test_only_the_hosts_that_pushed_are_read_again(
    app: Any, client: httpx.AsyncClient, reads: list[list[int]]
) -> None:
    tenant = await make_tenant(app, "acme")
    hosts = {}
    for name in ("a", "b"):
        hosts[name] = await enroll(client, tenant, name)
        body = retimed(example("observation-1.8.0-fake.json"), minutes_ago(1))
        assert (await push(client, hosts[name]["agentToken"], body)).status_code == 202
    url = "/api/v1/workspaces/acme/hosts"

    first = (await client.get(url, headers=tenant.auth())).json()
    assert len(reads) == 1
    assert len(reads[0]) == 2
    again = (await client.get(url, headers=tenant.auth())).json()
    assert again == first
    assert len(reads) == 1, "nothing pushed: nothing read again"

    body = retimed(example("observation-1.8.0-fake.json"))
    body["gpus"][0]["utilPct"] = 77
    assert (await push(client, hosts["a"]["agentToken"], body)).status_code == 202
    after = (await client.get(url, headers=tenant.auth())).json()
    assert len(reads) == 2
    assert len(reads[1]) == 1, "only the host that pushed"
    assert _utils(after)["a"][0] == 77
    assert _utils(after)["b"] == _utils(first)["b"]

    # The fleet page reads through the same keeping, and shows the push.
    await sign_in(client, "member@acme.example")
    fleet = (await client.get("/w/acme/fleet.json")).json()
    assert {h["displayName"]: [g["utilPct"] for g in h["gpus"]] for h in fleet["hosts"]} == (
        _utils(after)
    )
    assert len(reads) == 2

    # A revoked host is gone from the list, and from what is kept.
    r = await client.post(f"{url}/{hosts['b']['hostId']}/revoke", headers=tenant.auth())
    assert r.status_code == 200, r.text
    listed = (await client.get(url, headers=tenant.auth())).json()
    assert [h["displayName"] for h in listed["hosts"]] == ["a"]
    kept = {
        str(key[0])
        for hosts_kept in service._newest_kept.values()
        for key, _ in hosts_kept.values()
    }
    assert hosts["a"]["hostId"] in kept
    assert hosts["b"]["hostId"] not in kept


async def test_a_host_silent_for_long_is_read_every_time(
    app: Any, client: httpx.AsyncClient, reads: list[list[int]]
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, "old")
    late = service.KEEP_NEWEST_FOR.total_seconds() / 60 + 5
    body = retimed(example("observation-1.8.0-fake.json"), minutes_ago(late))
    assert (await push(client, host["agentToken"], body)).status_code == 202
    for _ in range(2):
        r = await client.get("/api/v1/workspaces/acme/hosts", headers=tenant.auth())
        assert r.status_code == 200, r.text
    assert len(reads) == 2
