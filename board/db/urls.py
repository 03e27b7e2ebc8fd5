"""Database URL resolution: the configured URL, else the embedded instance."""

from __future__ import annotations

import os

from board.settings import Settings


def resolve_database_url(settings: Settings) -> str:
    """The libpq-style URL every command uses (configured, else embedded)."""
    if settings.database_url:
        return settings.database_url
    from board.db.embedded import embedded_database_url

    url = embedded_database_url(settings.data_dir)
    # Worker processes and child commands inherit the resolved URL instead of racing
    # to start the embedded server themselves.
    os.environ["GUA_BOARD_DATABASE_URL"] = url
    return url


def sqlalchemy_url(url: str) -> str:
    """SQLAlchemy wants the driver named in the scheme."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    raise ValueError("not a PostgreSQL URL")


def libpq_url(url: str) -> str:
    """psycopg.connect() wants the plain scheme."""
    if url.startswith("postgresql+psycopg://"):
        return "postgresql://" + url[len("postgresql+psycopg://") :]
    return url
