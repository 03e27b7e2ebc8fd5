"""The composition root: what one board process holds, built and started in one place.

Settings, the SQLAlchemy engine and sessions, the raw pool (kit), and each domain's
long-lived parts: the ingest writer, the agent-access cache, the live stream hub, the
archive back-fill worker. Domains never import this module; routes reach these parts
through the kit's and their domain's dependencies, which read `app.state.runtime`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import psycopg
from fastapi import Depends, Request
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from board.archives.worker import Archives
from board.db.engine import make_engine, make_sessionmaker
from board.db.urls import libpq_url
from board.hosts.revocation import REVOKE_CHANNEL
from board.ingest.access import AgentAccess
from board.ingest.writer import IngestWriter
from board.notices.worker import Notices
from board.settings import Settings
from board.stream.hub import StreamHub

# How long a request waits for a raw pool connection before its 503.
POOL_WAIT_SECONDS = 5.0
RECONNECT_SECONDS = 20.0


async def _transactional(conn: psycopg.AsyncConnection[Any]) -> None:
    """Every connection goes back to the pool in transaction mode: a user that switched
    to autocommit and forgot to switch back must not hand the ingest writer a connection
    whose host locks end with each statement (the deadlocks of docs/architecture.md)."""
    if conn.autocommit:
        await conn.set_autocommit(False)


@dataclass
class Runtime:
    settings: Settings
    database_url: str
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    pool: AsyncConnectionPool[Any]
    writer: IngestWriter
    stream: StreamHub
    archives: Archives
    # Notices: the detector and delivery workers (started by the app with maintenance).
    notices: Notices
    # Agent token -> host, not revoked (board/ingest/access.py); its cache is cleared by
    # revocation notices that arrive on the stream hub's listener connection.
    access: AgentAccess = field(init=False)

    def __post_init__(self) -> None:
        self.access = AgentAccess(self.pool, self.stream.listener_epoch)
        self.stream.listen_also(REVOKE_CHANNEL, self.access.on_revocation_notice)
        self.stream.on_listener_change(self.access.listener_changed)

    @property
    def agent_tokens(self) -> dict[bytes, object]:
        """The cached agent tokens of this process (read-only use: tests)."""
        return dict(self.access.cache)

    def announce_revocation(self, workspace_id: int, host_id: int) -> None:
        """A host's revocation committed: this process forgets it now.

        The other processes hear it from the notification sent in the revoking
        transaction (hosts.service.revoke_host); this one need not wait for its own.
        """
        self.access.forget_host(workspace_id, host_id)

    @classmethod
    def create(cls, settings: Settings, database_url: str) -> Runtime:
        engine = make_engine(database_url, pool_size=settings.db_pool_size)
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            libpq_url(database_url),
            min_size=1,
            max_size=6,
            open=False,
            reset=_transactional,
            # Survives a database restart: a connection is checked as it is handed out
            # (one that died while idle is replaced, not failed in a request), a wait
            # for one ends in a 503 before an agent's own 10 s timeout, and reconnection
            # gives up within RECONNECT_SECONDS and starts afresh at the next request
            # (psycopg_pool's doubling delay would otherwise lag an outage by its length).
            check=AsyncConnectionPool.check_connection,
            timeout=POOL_WAIT_SECONDS,
            reconnect_timeout=RECONNECT_SECONDS,
        )
        writer = IngestWriter(pool, max_batch=settings.ingest_max_batch)
        sessions = make_sessionmaker(engine)
        return cls(
            settings=settings,
            database_url=database_url,
            engine=engine,
            sessions=sessions,
            pool=pool,
            writer=writer,
            stream=StreamHub(keep_seconds=settings.stream_keep_seconds),
            archives=Archives(pool, settings, writer),
            notices=Notices(settings, sessions, pool),
        )

    async def start(self) -> None:
        await self.pool.open(wait=True)
        await self.writer.start()
        await self.stream.start(libpq_url(self.database_url), self.pool)
        await self.archives.start()

    async def stop(self) -> None:
        await self.notices.stop()
        await self.archives.stop()
        await self.stream.stop()
        await self.writer.stop()
        await self.pool.close()
        await self.engine.dispose()


async def get_runtime(request: Request) -> Runtime:
    # async: a plain def dependency would be run in the threadpool on every request
    runtime: Runtime = request.app.state.runtime
    return runtime


# For the pages (board.web) and entry points only; domains use the kit's dependencies.
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
