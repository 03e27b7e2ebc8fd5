"""/healthz says the process serves; /readyz says the database answers too."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg


async def test_ready_while_the_database_answers(app: Any, client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).json() == {"status": "ok"}


async def test_not_ready_without_the_database(
    app: Any, client: httpx.AsyncClient, database_url: str, pg_admin_url: str
) -> None:
    name = database_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )
    try:
        r = await client.get("/readyz")
        assert r.status_code == 503
        assert isinstance(r.json()["detail"], str)
        # Alive all the same: a load balancer restarts on /healthz, routes on /readyz.
        assert (await client.get("/healthz")).status_code == 200
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
