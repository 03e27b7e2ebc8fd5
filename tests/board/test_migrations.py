"""The models and the migrations describe the same schema (`alembic check`)."""

from __future__ import annotations

from alembic import command

from board.db.migrate import alembic_config


def test_alembic_check_passes(database_url: str) -> None:
    command.check(alembic_config(database_url))  # raises when autogenerate finds a diff


def test_migrate_is_idempotent(database_url: str) -> None:
    command.upgrade(alembic_config(database_url), "head")
    command.check(alembic_config(database_url))
