"""Apply the alembic migrations programmatically (serve and `gua-board migrate`).

The migrations live in the checkout's top-level `migrations/` folder, and pyproject ships
that folder inside the package as `board/_migrations`: an installed wheel finds them in
the package, a checkout (editable install or none) beside it. alembic is configured
here, without `alembic.ini`, which a wheel does not have; the file is only for
developers' `alembic check` / `alembic revision` in a checkout.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from alembic import command
from alembic.config import Config

import board
from board.db.urls import libpq_url, sqlalchemy_url

_PACKAGE_ROOT = Path(board.__file__).resolve().parent
# In the wheel first: a checkout has no board/_migrations, and a site-packages/migrations
# beside an installed package would be someone else's.
_CANDIDATES = (_PACKAGE_ROOT / "_migrations", _PACKAGE_ROOT.parent / "migrations")


class MigrationsNotFound(RuntimeError):
    """Neither the installed package nor a checkout holds the migrations."""


def migrations_dir() -> Path:
    """The folder holding `env.py` and `versions/`."""
    for candidate in _CANDIDATES:
        if (candidate / "env.py").is_file():
            return candidate
    searched = " or ".join(str(c) for c in _CANDIDATES)
    raise MigrationsNotFound(f"the migrations are missing (looked in {searched}); reinstall")


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["database_url"] = sqlalchemy_url(database_url)
    return config


# Any constant works; it only has to be the same in every board process.
_MIGRATION_LOCK = 0x6775615F6D6967  # "gua_mig"


def upgrade(database_url: str) -> None:
    """Migrate to head, one process at a time: several `serve` processes starting together
    wait for the first, then find nothing left to do (instead of one failing its start)."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as lock:
        lock.execute("SELECT pg_advisory_lock(%s)", [_MIGRATION_LOCK])
        try:
            command.upgrade(alembic_config(database_url), "head")
        finally:
            lock.execute("SELECT pg_advisory_unlock(%s)", [_MIGRATION_LOCK])
