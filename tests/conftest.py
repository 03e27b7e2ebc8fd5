"""Real PostgreSQL for every test: the local server if one listens, else an embedded one.

The schema is built once per xdist worker from the migrations into a template database;
each test gets its own database cloned from it (CREATE DATABASE … TEMPLATE), so tests are
isolated even when the code under test commits, spawns servers or uses several processes.
The app in process (`app`, `client`), or served as a real process (`live_board`,
tests/support/live.py), runs on that database.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.databases import cloned_database, create_database, drop_database
from tests.support.live import LiveBoard, start_board, stop_board

_counter = itertools.count()


def _try_connect(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=3):
            return True
    except psycopg.OperationalError:
        return False


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    url = os.environ.get("GUA_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    if _try_connect(url):
        yield url
        return
    # No server on this machine: an embedded one, just for this test run.
    from pgserver import postgres_server

    pgdata = Path(tempfile.mkdtemp(prefix="gua-test-pg-"))
    server = postgres_server.get_server(pgdata, cleanup_mode="delete")
    yield server.get_uri()


@pytest.fixture(scope="session")
def worker_tag(request: pytest.FixtureRequest) -> str:
    worker = getattr(request.config, "workerinput", {}).get("workerid", "main")
    return f"{worker}_{os.getpid()}"


@pytest.fixture(scope="session")
def template_db(pg_admin_url: str, worker_tag: str) -> Iterator[str]:
    import asyncio

    from board.db.migrate import upgrade
    from board.observations.maintenance import run_maintenance

    name = f"gua_tpl_{worker_tag}"
    url = create_database(pg_admin_url, name)
    upgrade(url)

    async def partitions() -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await run_maintenance(conn, retention_days=35, ahead_days=3)

    asyncio.run(partitions())
    yield name
    drop_database(pg_admin_url, name)


@pytest.fixture
def database_url(pg_admin_url: str, template_db: str, worker_tag: str) -> Iterator[str]:
    name = f"gua_t_{worker_tag}_{next(_counter)}"
    with cloned_database(pg_admin_url, template_db, name) as url:
        yield url


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> object:
    from board.settings import Settings

    return Settings(database_url=database_url, data_dir=tmp_path / "data")


@pytest.fixture
async def app(settings: object) -> AsyncIterator[object]:
    from board.app import create_app
    from board.settings import Settings

    assert isinstance(settings, Settings)
    application = create_app(settings, run_maintenance=False)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(app: object) -> AsyncIterator[object]:
    import httpx

    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as c:
        yield c


@pytest.fixture
def live_board(database_url: str, tmp_path: Path) -> Iterator[LiveBoard]:
    """`gua-board serve` as a subprocess on a free loopback port, on this test's database."""
    board = start_board(database_url, tmp_path / "board-data")
    yield board
    stop_board(board)


@pytest.fixture(scope="session", autouse=True)
def _cheap_argon2() -> Iterator[None]:
    """Real argon2id hashes, with the cost turned down: tests create many users."""
    from argon2 import PasswordHasher

    from board.auth import passwords

    original = passwords._hasher
    passwords._hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    yield
    passwords._hasher = original
