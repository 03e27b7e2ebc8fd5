"""A form's change, and its page drawn again when the change is refused.

Every page form posts the same way: make the change, answer (a redirect, or a page that
shows what was made), and on a refusal draw the form's page again with the sentence
and status of the refusal. The request's session commits the change before the
answer is sent (board/db/deps.py); a refusal undoes only the change, in its savepoint.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Response
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.engine import savepoint
from board.errors import DomainError
from board.web.deps import Page


async def submit(
    db: AsyncSession,
    page: Page,
    change: Callable[[], Awaitable[Response]],
    again: Callable[[DomainError], Awaitable[Response]],
) -> Response:
    """`change()`'s answer, or, when it raises a DomainError, `again(error)`: the form's
    page drawn with nothing of the refused change (the rest of the request stays)."""
    try:
        async with savepoint(db):
            return await change()
    except DomainError as exc:
        # Rows the change touched were expired by the rollback; the page reads the
        # workspace's again (a lazy load of it would fail outside the async context).
        await db.refresh(page.ctx.workspace)
        return await again(exc)
