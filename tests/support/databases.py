"""Databases of the tests: each one a clone of the migrated template (CREATE DATABASE …
TEMPLATE), or empty for the tests of migrations and restores, named by the caller and
dropped when done. tests/conftest.py builds the template."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg


def url_for(admin_url: str, dbname: str) -> str:
    """The admin server's connection string, naming another database."""
    conninfo = psycopg.conninfo.conninfo_to_dict(admin_url)
    conninfo["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in conninfo.items() if v is not None})


def as_url(conninfo: str) -> str:
    """libpq key=value to a postgresql:// URL, which the settings accept."""
    parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    host = str(parts.get("host", "127.0.0.1"))
    port = parts.get("port", 5432)
    user = parts.get("user", "postgres")
    dbname = parts["dbname"]
    if host.startswith("/"):
        return f"postgresql://{user}@/{dbname}?host={host}&port={port}"
    return f"postgresql://{user}@{host}:{port}/{dbname}"


def create_database(admin_url: str, name: str, template: str | None = None) -> str:
    """A new database (a clone of `template` if given), dropped first if it is left over;
    its URL."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if template is None:
            conn.execute(f'CREATE DATABASE "{name}"')
        else:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return as_url(url_for(admin_url, name))


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def cloned_database(admin_url: str, template: str, name: str) -> Iterator[str]:
    """A clone of the template for the with-block; its URL."""
    url = create_database(admin_url, name, template)
    try:
        yield url
    finally:
        drop_database(admin_url, name)


@contextlib.contextmanager
def empty_database(admin_url: str, name: str) -> Iterator[str]:
    """A database with no schema at all for the with-block; its URL."""
    url = create_database(admin_url, name)
    try:
        yield url
    finally:
        drop_database(admin_url, name)
