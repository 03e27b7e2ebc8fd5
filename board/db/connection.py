"""The request's own database connection, as psycopg, for SQL that SQLAlchemy does not write."""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession


async def report_connection(session: AsyncSession) -> psycopg.AsyncConnection[Any]:
    """The session's connection and transaction (the reports' SQL runs in it, so a report
    reads the same snapshot as the rest of the request and commits with it)."""
    conn = await session.connection()
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert isinstance(driver, psycopg.AsyncConnection)
    return driver
