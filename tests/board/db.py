"""Reading the test database directly, to assert what was (not) stored."""

from __future__ import annotations

from typing import Any

from board.runtime import Runtime


async def scalar(app: Any, sql: str, *params: Any) -> Any:
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        cur = await conn.execute(sql, list(params))
        row = await cur.fetchone()
        return row[0] if row else None


async def rows(app: Any, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        cur = await conn.execute(sql, list(params))
        return list(await cur.fetchall())


async def execute(app: Any, sql: str, *params: Any) -> None:
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        await conn.execute(sql, list(params))
