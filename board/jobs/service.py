"""Job records in, the jobs list out (docs/jobs.md): the rules between the wire and the
tables. Services never commit: the request's scope owns the transaction."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from board.jobs.recording import store_records
from board.jobs.records import JobRecord


async def record_jobs(
    session: AsyncSession, workspace_id: int, records: Sequence[JobRecord]
) -> None:
    """Store the records (at most one per run): each replaces its run's known fields and
    the allocation on each host it names (board.jobs.recording)."""
    await store_records(session, workspace_id, records)
