"""A GPU whose reported name changes: the board shows its name now, and keeps the names
it had before (gpu_name_history), by which its past hours are priced; a late point
(a spool replayed, an archive back-filled) changes no GPU."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.board.builders import enroll, example, make_tenant, minutes_ago, push, retimed
from tests.board.db import rows, scalar


def _named(at_minutes_ago: float, name: str) -> dict[str, Any]:
    body = retimed(example("observation-1.8.0-fake.json"), minutes_ago(at_minutes_ago))
    body["gpus"][0]["name"] = name
    return body


async def _push(client: Any, host: dict[str, Any], body: dict[str, Any]) -> None:
    r = await push(client, host["agentToken"], body)
    assert r.status_code == 202, r.text


async def _names(app: Any) -> tuple[str, list[tuple[Any, ...]]]:
    uuid = example("observation-1.8.0-fake.json")["gpus"][0]["uuid"]
    now = await scalar(app, "SELECT name FROM gpus WHERE uuid = %s", uuid)
    history = await rows(
        app,
        "SELECT h.name, h.since, h.until FROM gpu_name_history h "
        "JOIN gpus g ON g.workspace_id = h.workspace_id AND g.id = h.gpu_id "
        "WHERE g.uuid = %s ORDER BY h.until",
        uuid,
    )
    return str(now), history


async def test_a_rename_keeps_the_old_name_for_the_time_before_it(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    first, second = _named(30, "NVIDIA A100"), _named(20, "NVIDIA A100 80GB")
    third = _named(10, "NVIDIA A100-SXM4-80GB")
    for body in (first, second, third):
        await _push(client, host, body)
    now, history = await _names(app)
    assert now == "NVIDIA A100-SXM4-80GB"
    assert [h[0] for h in history] == ["NVIDIA A100", "NVIDIA A100 80GB"]
    # Each name holds from where the one before it ended to the first push without it.
    assert history[0][1] == datetime(2000, 1, 1, tzinfo=UTC)
    assert history[0][2] == datetime.fromisoformat(second["observedAt"])
    assert history[1][1] == history[0][2]
    assert history[1][2] == datetime.fromisoformat(third["observedAt"])


async def test_a_late_point_with_the_old_name_changes_no_gpu(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    await _push(client, host, _named(30, "NVIDIA A100"))
    await _push(client, host, _named(10, "NVIDIA H100"))
    await _push(client, host, _named(20, "NVIDIA A100"))  # a replayed, older snapshot
    now, history = await _names(app)
    assert now == "NVIDIA H100"
    assert [h[0] for h in history] == ["NVIDIA A100"]
