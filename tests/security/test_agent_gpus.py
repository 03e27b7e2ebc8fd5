"""GPU identities on the served board: a host mints no more than its workspace's
`maxGpusPerHost` (a setting that takes whole numbers only), and a UUID or a host name
known in one workspace, or on another host, touches nothing but its own.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.security.checks import host_view, stored
from tests.security.conftest import db
from tests.security.seed import (
    Host,
    Tenant,
    enroll,
    observation,
    push,
    unique,
)
from tests.support.live import LiveBoard
from tests.support.replies import Reply, refused


def _set_max_gpus(board: LiveBoard, tenant: Tenant, value: object) -> Reply:
    with board.client(tenant.admin.token) as c:
        return board.call(
            c, "PATCH", f"/api/v1/workspaces/{tenant.slug}/settings", json={"maxGpusPerHost": value}
        )


@pytest.mark.parametrize("value", [0, -1, 4097, 10**30, "7", 7.5, None, True])
def test_max_gpus_setting_bad_values(board: LiveBoard, scratch: Tenant, value: object) -> None:
    refused(_set_max_gpus(board, scratch, value), 400, 422)


def test_gpu_identities_per_host_are_capped(board: LiveBoard, scratch: Tenant, host: Host) -> None:
    limit = 7
    reply = _set_max_gpus(board, scratch, limit)
    assert reply.status_code == 200, reply
    assert reply.json()["maxGpusPerHost"] == limit, reply
    first = tuple(f"GPU-first-{i}" for i in range(4))
    assert push(board, host, observation(gpu_uuids=first)).status_code == 202
    before = stored(board, host)
    assert before[1] == 4, before
    others = tuple(f"GPU-other-{i}" for i in range(4))
    detail = refused(push(board, host, observation(gpu_uuids=others)), 422)
    assert str(limit) in detail, f"the refusal does not name the limit: {detail}"
    assert stored(board, host) == before
    # One push with more cards than the limit, on a new host, is refused too.
    fresh = enroll(board, scratch, unique("many-gpus"))
    many = tuple(f"GPU-many-{i}" for i in range(limit + 1))
    detail = refused(push(board, fresh, observation(gpu_uuids=many)), 422)
    assert str(limit) in detail, detail
    assert stored(board, fresh)[1] == 0
    # The cards already known keep reporting.
    assert push(board, host, observation(gpu_uuids=first)).status_code == 202


def hosts_of(board: LiveBoard, tenant: Tenant) -> list[dict[str, Any]]:
    with board.client(tenant.admin.token) as c:
        reply = board.call(c, "GET", f"/api/v1/workspaces/{tenant.slug}/hosts")
    assert reply.status_code == 200, reply
    found: list[dict[str, Any]] = reply.json()["hosts"]
    return found


def test_a_uuid_known_in_another_workspace_stays_there(
    board: LiveBoard, scratch: Tenant, other: Tenant
) -> None:
    """GPUs are keyed by host: the same UUID in two workspaces is two GPUs, and neither
    workspace sees the other's model name, users or processes."""
    mine = enroll(board, scratch, unique("uuid-mine"))
    theirs = enroll(board, other, unique("uuid-theirs"))
    uuid = unique("GPU-shared")
    secret_user = unique("secretuser").replace("-", "")
    body = observation(users=(secret_user,), gpu_uuids=(uuid,), gpu_names=("THEIR SECRET GPU",))
    assert push(board, theirs, body).status_code == 202
    mine_body = observation(gpu_uuids=(uuid,), gpu_names=("MY GPU",))
    assert push(board, mine, mine_body).status_code == 202
    url = board.env["GUA_BOARD_DATABASE_URL"]
    assert db(url, "SELECT count(DISTINCT id) FROM gpus WHERE uuid = %s", uuid) == 2
    seen = json.dumps(hosts_of(board, scratch))
    assert "THEIR SECRET GPU" not in seen
    assert secret_user not in seen
    theirs_seen = json.dumps(hosts_of(board, other))
    assert "MY GPU" not in theirs_seen
    assert theirs_seen.count(uuid) == 1


def test_a_host_naming_itself_like_another_touches_only_itself(
    board: LiveBoard, scratch: Tenant
) -> None:
    victim = enroll(board, scratch, unique("victim"))
    assert push(board, victim, observation()).status_code == 202
    before = host_view(board, scratch, victim)
    attacker = enroll(board, scratch, unique("attacker"))
    body = observation()
    body["host"].update(
        hostname=before["hostname"], hostId=victim.host_id, displayName=victim.display_name
    )
    assert push(board, attacker, body).status_code == 202
    after = host_view(board, scratch, victim)
    assert (after["displayName"], after["lastSeenAt"]) == (
        before["displayName"],
        before["lastSeenAt"],
    )
    mine = host_view(board, scratch, attacker)
    assert mine["displayName"] == attacker.display_name  # set at enrollment only
    assert mine["hostId"] == attacker.host_id
