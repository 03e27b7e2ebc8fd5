"""Engine and the unit of work: one transaction per request (or command), committed once
at its end or rolled back, and the work that must wait for that commit.

Nothing else commits or rolls back the request's session: services and routes only
write. A part that may be refused on its own runs in a `savepoint`; work that another
process must see the moment it is durable (an archive worker's wake-up, a host's
revocation in this process's caches, deleting objects nothing points at any more) is
handed to `after_commit`, which `session_scope` runs right after its COMMIT and before
the request is answered, and never if the transaction rolls back.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from board.db.urls import sqlalchemy_url

AfterCommit = Callable[[], Awaitable[None] | None]
_AFTER_COMMIT = "board.after_commit"  # the key of the session's pending work in session.info


def make_engine(url: str, pool_size: int = 10) -> AsyncEngine:
    return create_async_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
    )


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)


def _pending(session: AsyncSession) -> list[AfterCommit]:
    pending: list[AfterCommit] = session.info.setdefault(_AFTER_COMMIT, [])
    return pending


def after_commit(session: AsyncSession, work: AfterCommit) -> None:
    """Run `work` (a function, or a coroutine function) once the session's transaction
    has committed; dropped if it, or the savepoint it was asked in, rolls back."""
    _pending(session).append(work)


@asynccontextmanager
async def savepoint(session: AsyncSession) -> AsyncIterator[None]:
    """A part of the transaction that an exception undoes alone (SAVEPOINT), with the
    after-commit work asked inside it; the exception passes on, the rest stays."""
    pending = _pending(session)
    asked_before = len(pending)
    nested = await session.begin_nested()
    try:
        yield
    except Exception:
        del pending[asked_before:]
        await nested.rollback()
        raise
    await nested.commit()


@asynccontextmanager
async def session_scope(maker: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """One transaction: services never commit, this does (then runs the after-commit
    work in the order asked); any exception rolls it back and drops that work."""
    async with maker() as session:
        try:
            yield session
            await session.commit()
        except BaseException:
            _pending(session).clear()
            await session.rollback()
            raise
        pending = _pending(session)
        while pending:
            done = pending.pop(0)()
            if inspect.isawaitable(done):
                await done
