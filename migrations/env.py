"""Alembic environment: the board's metadata, its URL rule, partitions left out."""

from __future__ import annotations

import re
from logging.config import fileConfig
from typing import Any

from alembic import context
from sqlalchemy import create_engine, pool

from board.db.urls import resolve_database_url, sqlalchemy_url
from board.metadata import Base
from board.settings import Settings

config = context.config
# Only the `alembic` command has an ini file (and logging set up by it); the board
# configures alembic in code (board/db/migrate.py) and leaves logging to the server.
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata
_PARTITION_NAME = re.compile(r"_p\d{8}$")


def _url() -> str:
    url = config.attributes.get("database_url")
    if url is None:
        url = resolve_database_url(Settings())
    return sqlalchemy_url(str(url))


# Made by the migration "compact raw history" alone: its column of a composite type is
# beyond SQLAlchemy's reflection (board/observations/tables.py).
_OUTSIDE_METADATA = {"observation_hours"}


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    # Daily partition children are made at run time by board.observations.
    if type_ == "table" and name is not None:
        return not (_PARTITION_NAME.search(name) or name in _OUTSIDE_METADATA)
    return True


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(
            connection=connection, target_metadata=target_metadata, include_name=include_name
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as conn:
        context.configure(
            connection=conn, target_metadata=target_metadata, include_name=include_name
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
