"""What one board process holds: settings, the SQLAlchemy engine, the raw pool, the writer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from board.db.engine import make_engine, make_sessionmaker
from board.db.urls import libpq_url
from board.ingest.writer import IngestWriter
from board.settings import Settings
from board.stream.hub import StreamHub

if TYPE_CHECKING:
    from board.archives.worker import Archives


@dataclass
class Runtime:
    settings: Settings
    database_url: str
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    pool: AsyncConnectionPool[Any]
    writer: IngestWriter
    # Agent token digest -> (workspace_id, host_id). Revocation is still checked in the
    # ingest transaction, so a cached entry never lets a revoked host's push through.
    agent_tokens: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    # The live utilization stream and the archive back-fill worker, run by the app's lifespan.
    stream: StreamHub = field(default_factory=StreamHub)
    archives: Archives | None = None

    @classmethod
    def create(cls, settings: Settings, database_url: str) -> Runtime:
        engine = make_engine(database_url, pool_size=settings.db_pool_size)
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            libpq_url(database_url), min_size=1, max_size=6, open=False
        )
        return cls(
            settings=settings,
            database_url=database_url,
            engine=engine,
            sessions=make_sessionmaker(engine),
            pool=pool,
            writer=IngestWriter(pool, max_batch=settings.ingest_max_batch),
        )

    async def start(self) -> None:
        await self.pool.open(wait=True)
        await self.writer.start()

    async def stop(self) -> None:
        await self.writer.stop()
        await self.pool.close()
        await self.engine.dispose()


async def get_runtime(request: Request) -> Runtime:
    # async: a plain def dependency would be run in the threadpool on every request
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_session(runtime: RuntimeDep) -> Any:
    from board.db.engine import session_scope

    async for session in session_scope(runtime.sessions):
        yield session


# scope="function": commit before the response is sent, so a 2xx always means committed.
SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]
