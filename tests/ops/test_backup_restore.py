"""Backup and restore as docs/operations.md says: pg_dump -Fc of a live board's database,
pg_restore into a fresh one, and a board on the restored database answers the same
reports, hosts and CSV as the original."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from board.app import create_app
from board.settings import Settings
from tests.board.builders import enroll, example, make_tenant, push, retimed
from tests.support.databases import create_database, drop_database

VOLATILE = {"generatedAt", "lastSeenSecondsAgo", "secondsAgo"}


def stable(value: Any) -> Any:
    """The answer without the fields that say when it was made."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


async def answers(client: httpx.AsyncClient, auth: dict[str, str], day: str) -> list[Any]:
    span = {"from": day, "to": (datetime.fromisoformat(day) + timedelta(days=1)).date().isoformat()}
    out: list[Any] = []
    for path, params in (
        ("reports/usage", span),
        ("reports/utilization", span),
        ("reports/usage", {**span, "format": "csv"}),
        ("hosts", {}),
    ):
        r = await client.get(f"/api/v1/workspaces/acme/{path}", params=params, headers=auth)
        assert r.status_code == 200, r.text
        out.append(r.text if params.get("format") == "csv" else stable(r.json()))
    return out


async def test_a_restored_database_answers_the_same_reports(
    app: Any,
    client: httpx.AsyncClient,
    database_url: str,
    pg_admin_url: str,
    tmp_path: Path,
) -> None:
    tenant = await make_tenant(app, "acme")
    start = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    for name in ("gpu-a", "gpu-b"):
        host = await enroll(client, tenant, name)
        for minute in range(0, 90, 1):
            body = retimed(
                example("observation-1.8.0-fake.json"), start + timedelta(minutes=minute)
            )
            assert (await push(client, host["agentToken"], body)).status_code == 202
    day = start.date().isoformat()
    before = await answers(client, tenant.auth("admin"), day)
    assert "gpu-a" in str(before[-1])

    dump = tmp_path / "board.dump"
    subprocess.run(
        ["pg_dump", "--format=custom", "--no-owner", f"--file={dump}", "--dbname", database_url],
        check=True,
        capture_output=True,
    )
    restored = database_url.rsplit("/", 1)[0] + "/" + database_url.rsplit("/", 1)[1] + "_restored"
    name = restored.rsplit("/", 1)[1]
    create_database(pg_admin_url, name)
    try:
        subprocess.run(
            ["pg_restore", "--no-owner", "--exit-on-error", "--dbname", restored, str(dump)],
            check=True,
            capture_output=True,
        )
        board = create_app(
            Settings(database_url=restored, data_dir=tmp_path / "restored"), run_maintenance=False
        )
        async with board.router.lifespan_context(board):
            transport = httpx.ASGITransport(app=board)
            async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as c:
                after = await answers(c, tenant.auth("admin"), day)
                # Agents carry on against the restored board with the tokens they have.
                now = retimed(example("observation-1.8.0-fake.json"))
                assert (await push(c, host["agentToken"], now)).status_code == 202
        assert after == before
    finally:
        drop_database(pg_admin_url, name)
