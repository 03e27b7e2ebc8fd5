"""The models and the migrations describe the same schema (`alembic check`)."""

from __future__ import annotations

import os

from alembic import command

from board.db.migrate import alembic_config


def test_alembic_check_passes(database_url: str) -> None:
    command.check(alembic_config(database_url))  # raises when autogenerate finds a diff


def test_migrate_is_idempotent(database_url: str) -> None:
    command.upgrade(alembic_config(database_url), "head")
    command.check(alembic_config(database_url))


def test_processes_starting_together_migrate_one_at_a_time(pg_admin_url: str) -> None:
    """Two upgrades of one empty database at once: both succeed (the second waits for the
    first, then has nothing left to do) and the schema is whole."""
    from concurrent.futures import ThreadPoolExecutor

    import psycopg

    from board.db.migrate import upgrade
    from tests.conftest import _as_url, _url_for

    name = f"gua_migrate_race_{os.getpid()}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _as_url(_url_for(pg_admin_url, name))
    try:
        with ThreadPoolExecutor(2) as pool:
            for done in [pool.submit(upgrade, url) for _ in range(2)]:
                done.result()
        command.check(alembic_config(url))
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
