"""Database access for routes: the request's session (one transaction) and the raw pool.

The request's session is the one place its transaction ends (board/db/engine.py):
committed once the route has returned, before the response is sent (so a 2xx always
means committed, and a streamed answer holds no database connection), or rolled back
by an exception that passes through it. Routes never commit: a form's change that may
be refused runs in a savepoint (board/web/forms.py), and what must follow the commit
is asked with `after_commit`, which runs right after it, still before the answer.

Read from the process's runtime on `app.state` by attribute, so this kit module needs
nothing from the domains (`board.runtime`, the composition root, builds both).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.requests import HTTPConnection

from board.db.engine import session_scope


async def get_session(connection: HTTPConnection) -> AsyncIterator[AsyncSession]:
    async with session_scope(connection.app.state.runtime.sessions) as session:
        yield session


# scope="function": commit (and the after-commit work) before the response is sent.
SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]


async def get_pool(connection: HTTPConnection) -> AsyncConnectionPool[Any]:
    pool: AsyncConnectionPool[Any] = connection.app.state.runtime.pool
    return pool


PoolDep = Annotated[AsyncConnectionPool[Any], Depends(get_pool)]


async def get_sessionmaker(connection: HTTPConnection) -> async_sessionmaker[AsyncSession]:
    """For work after the request's own session ended (a long stream's re-checks)."""
    sessions: async_sessionmaker[AsyncSession] = connection.app.state.runtime.sessions
    return sessions


SessionMakerDep = Annotated[async_sessionmaker[AsyncSession], Depends(get_sessionmaker)]
