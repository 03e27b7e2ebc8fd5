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

    from board.db.migrate import upgrade
    from tests.support.databases import empty_database

    with empty_database(pg_admin_url, f"gua_migrate_race_{os.getpid()}") as url:
        with ThreadPoolExecutor(2) as pool:
            for done in [pool.submit(upgrade, url) for _ in range(2)]:
                done.result()
        command.check(alembic_config(url))


def test_tables_updated_in_place_keep_room_for_hot_updates(database_url: str) -> None:
    """The rows every push updates leave room on their pages (migration "fillfactor for
    updated rows"), as the models say; the downgrade gives the default back."""
    import psycopg

    from board.db.base import Base

    expected = {
        "hosts": 50,
        "gpu_hour_rollups": 80,
        "user_hour_rollups": 80,
        "host_hour_rollups": 80,
    }
    for table, fillfactor in expected.items():
        options = Base.metadata.tables[table].dialect_options["postgresql"]["with"]
        assert options == {"fillfactor": fillfactor}

    def stored() -> dict[str, list[str] | None]:
        with psycopg.connect(database_url) as conn:
            rows = conn.execute(
                "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)",
                [list(expected)],
            ).fetchall()
        return {str(name): options for name, options in rows}

    assert stored() == {t: [f"fillfactor={f}"] for t, f in expected.items()}
    config = alembic_config(database_url)
    command.downgrade(config, "a23d5f9a2b30")
    assert stored() == dict.fromkeys(expected)
    command.upgrade(config, "head")
    assert stored() == {t: [f"fillfactor={f}"] for t, f in expected.items()}


def test_zone_folder_copies_stored_as_workspace_zones_become_iana_zones(database_url: str) -> None:
    import psycopg

    from board.zones import iana_zone

    config = alembic_config(database_url)
    command.downgrade(config, "a25c8d2e4f50")
    stored = {
        "zr": "right/Europe/Berlin",
        "zp": "posix/America/New_York",
        "zl": "localtime",
        "zx": "posixrules",
        "zb": "Europe/Berlin",
    }
    conninfo = database_url
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for slug, zone in stored.items():
            conn.execute(
                "INSERT INTO workspaces (slug, name, timezone) VALUES (%s, %s, %s)",
                (slug, slug, zone),
            )
    command.upgrade(config, "head")
    with psycopg.connect(conninfo) as conn:
        zones = dict(
            conn.execute(
                "SELECT slug, timezone FROM workspaces WHERE slug = ANY(%s)", (list(stored),)
            ).fetchall()
        )
    assert zones == {
        "zr": "Europe/Berlin",
        "zp": "America/New_York",
        "zl": "UTC",
        "zx": "UTC",
        "zb": "Europe/Berlin",
    }
    for zone in zones.values():
        iana_zone(zone)
