"""Archive rules: which objects an agent may upload, storing and listing them, pruning.

An upload is checked whole (board.archives.csvfile) before it is stored, so a refused
upload changes nothing. A day's back-fill is queued when both of its time-series
objects are there (the agent posts gpu_sample, then proc_sample, of each day): a tick
needs the GPU rows and the process rows of the same instant, and a tick stored from
one of them alone could never be completed later, since stored ticks are skipped.
"""

from __future__ import annotations

import asyncio
import re
import threading
import weakref
from datetime import UTC, date, datetime, time, timedelta
from typing import BinaryIO

from sqlalchemy import delete, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from board.archives.csvfile import TABLES, BadArchive, Checked, Limits, size_of, validate
from board.archives.models import FULL, ArchiveBackfill, ArchiveObject
from board.archives.schemas import (
    ArchiveOut,
    BackfillOut,
    BackfillStatus,
    HostArchivesOut,
    UploadOut,
)
from board.archives.storage import ArchiveStore, object_key, put_object
from board.archives.upload import too_large
from board.errors import BadRequest, PayloadTooLarge, Unprocessable
from board.hosts.service import get_host_row
from board.settings import Settings

DAY_TABLES = tuple(t for t, spec in TABLES.items() if spec.daily)
# ASCII digits only: `\d` would also take "２０２６", which PostgreSQL's check refuses.
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# No agent history is older; it also keeps every date computation far from year 1.
EARLIEST_DAY = date(2000, 1, 1)
MAX_OLDER_THAN_DAYS = 36_500
# Archive checks running at once per process (each a thread, CPU-bound): more uploads
# wait their turn rather than take every core.
VALIDATIONS_AT_ONCE = 2
_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _shown(text: str, limit: int = 40) -> str:
    """A query value as a detail quotes it: repr (no control characters), shortened."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def parse_target(
    table: str | None, day_text: str | None, now: datetime, settings: Settings
) -> tuple[str, str, date | None]:
    """(table, day as stored, the UTC day or None for `_full`), or a 422 saying why."""
    if not table:
        raise Unprocessable("The query parameter 'table' is required.")
    spec = TABLES.get(table)
    if spec is None:
        raise Unprocessable(
            f"Unknown archive table {_shown(table)}; expected one of {', '.join(TABLES)}."
        )
    if not day_text:
        raise Unprocessable("The query parameter 'date' is required.")
    if not spec.daily:
        if day_text != FULL:
            raise Unprocessable(f"The {table} table is archived whole: use date={FULL}.")
        return table, FULL, None
    if day_text == FULL or not _DATE.fullmatch(day_text):
        raise Unprocessable(
            f"The {table} table is archived per UTC day: date must be YYYY-MM-DD, "
            f"not {_shown(day_text)}."
        )
    try:
        day = date.fromisoformat(day_text)
    except ValueError:
        raise Unprocessable(f"date {day_text} is not a calendar date.") from None
    if day < EARLIEST_DAY:
        raise Unprocessable(f"date {day_text} is before {EARLIEST_DAY}; no archive is that old.")
    # Only closed days: the day must have ended, allowing the clock skew live pushes get.
    # Compared as "day starts at least a day before now + skew": day + 1 would overflow
    # for 9999-12-31.
    latest_start = now.astimezone(UTC) + timedelta(seconds=settings.max_future_seconds - 86_400)
    if datetime.combine(day, time(), UTC) > latest_start:
        raise Unprocessable(
            f"date {day_text} is not a closed UTC day yet (the board's clock says "
            f"{now.isoformat()}); only past days are archived."
        )
    return table, day.isoformat(), day


def parse_older_than_days(text: str | None) -> int:
    """The DELETE's olderThanDays: ASCII digits, 0..36500, or a 422 saying so."""
    rule = f"a whole number of days from 0 to {MAX_OLDER_THAN_DAYS}"
    if text is None or text == "":
        raise Unprocessable(f"The query parameter 'olderThanDays' is required: {rule}.")
    if not text.isascii() or not text.isdigit():
        raise Unprocessable(f"olderThanDays must be {rule}, not {_shown(text)}.")
    # Length first: int() of a string of more than 4,300 digits raises.
    significant = text.lstrip("0") or "0"
    if len(significant) > len(str(MAX_OLDER_THAN_DAYS)) or int(significant) > MAX_OLDER_THAN_DAYS:
        raise Unprocessable(f"olderThanDays must be {rule}, not {_shown(text)}.")
    return int(significant)


async def list_archives(
    session: AsyncSession, workspace_id: int, host_id: int
) -> list[ArchiveObject]:
    return list(
        (
            await session.scalars(
                select(ArchiveObject)
                .where(ArchiveObject.workspace_id == workspace_id, ArchiveObject.host_id == host_id)
                .order_by(ArchiveObject.day, ArchiveObject.table_name)
            )
        ).all()
    )


def object_view(obj: ArchiveObject) -> ArchiveOut:
    return ArchiveOut(
        date=obj.day,
        table=obj.table_name,
        size_bytes=obj.size_bytes,
        rows=obj.row_count,
        uploaded_at=obj.uploaded_at,
    )


async def store_archive(
    session: AsyncSession,
    store: ArchiveStore,
    settings: Settings,
    principal: tuple[int, int],
    target: tuple[str, str, date | None],
    data: BinaryIO,
) -> UploadOut:
    """Validate, store (replacing an earlier upload) and index one object: a seekable
    file of its bytes (board.archives.upload spools the body), read as a stream."""
    workspace_id, host_id = principal
    table, day_text, day = target
    size = size_of(data)
    if size > settings.archive_max_bytes:
        raise too_large(settings.archive_max_bytes)
    try:
        checked = await check_upload(table, day, data, Limits.of(settings))
    except BadArchive as exc:
        if exc.too_large:
            raise PayloadTooLarge(exc.detail) from None
        raise BadRequest(exc.detail) from None
    rows = checked.rows
    key = object_key(workspace_id, host_id, table, day_text)
    now = datetime.now(UTC)
    data.seek(0)
    await put_object(store, key, data)
    values = {
        "workspace_id": workspace_id,
        "host_id": host_id,
        "table_name": table,
        "day": day_text,
        "storage_key": key,
        "size_bytes": size,
        "row_count": rows,
        "sha256": checked.sha256,
        "uploaded_at": now,
    }
    upsert = insert(ArchiveObject).values(values)
    await session.execute(
        upsert.on_conflict_do_update(
            index_elements=["workspace_id", "host_id", "table_name", "day"],
            set_={k: upsert.excluded[k] for k in values if k not in ("table_name", "day")},
        )
    )
    backfill: BackfillStatus | None = None
    if day is not None:
        backfill = await request_backfill(session, workspace_id, host_id, day)
    elif table == "gpu_device":
        await release_waiting(session, workspace_id, host_id)
    return UploadOut(date=day_text, table=table, rows=rows, size_bytes=size, backfill=backfill)


async def check_upload(
    table: str,
    day: date | None,
    data: bytes | BinaryIO,
    limits: Limits,
    stop: threading.Event | None = None,
) -> Checked:
    """Validate in a thread, a few at a time; called off if the request goes away.

    The event loop keeps serving meanwhile (the thread holds the GIL only between
    chunks of gzip and CSV work, and the digest is computed there too). Cancelling the
    awaiting task sets `stop`, which the reading thread checks every 1,024 rows (and
    then ends with csvfile.Stopped, which nobody awaits any more).
    """
    stop = stop or threading.Event()
    try:
        async with validation_gate():
            return await asyncio.to_thread(validate, table, day, data, limits, stop)
    except BaseException:
        stop.set()  # a cancel leaves the thread running: tell it to stop
        raise


def validation_gate() -> asyncio.Semaphore:
    """This event loop's turn-taking for archive checks (VALIDATIONS_AT_ONCE at a time)."""
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        gate = _gates[loop] = asyncio.Semaphore(VALIDATIONS_AT_ONCE)
    return gate


async def request_backfill(
    session: AsyncSession, workspace_id: int, host_id: int, day: date
) -> BackfillStatus:
    """Queue (or re-queue) a day once both of its objects are stored; its new status."""
    have = set(
        (
            await session.scalars(
                select(ArchiveObject.table_name).where(
                    ArchiveObject.workspace_id == workspace_id,
                    ArchiveObject.host_id == host_id,
                    ArchiveObject.day == day.isoformat(),
                    ArchiveObject.table_name.in_(DAY_TABLES),
                )
            )
        ).all()
    )
    missing = [t for t in DAY_TABLES if t not in have]
    status = "waiting" if missing else "pending"
    reason = f"waiting for the {missing[0]} archive of this day" if missing else None
    # A running back-fill keeps running; the raised requested_seq makes it run again.
    row = await session.execute(
        text(
            """
            INSERT INTO archive_backfills AS b (workspace_id, host_id, day, status, reason,
                                                requested_seq, requested_at)
            VALUES (:w, :h, :day, :status, :reason, 1, now())
            ON CONFLICT (workspace_id, host_id, day) DO UPDATE SET
                requested_seq = b.requested_seq + 1,
                requested_at = now(),
                not_before = NULL,
                status = CASE WHEN b.status = 'running' THEN b.status ELSE EXCLUDED.status END,
                reason = CASE WHEN b.status = 'running' THEN b.reason ELSE EXCLUDED.reason END,
                attempts = CASE WHEN b.status = 'running' THEN b.attempts ELSE 0 END
            RETURNING b.status
            """
        ),
        {"w": workspace_id, "h": host_id, "day": day, "status": status, "reason": reason},
    )
    status_now: BackfillStatus = row.scalar_one()  # the table's check holds it to these
    return status_now


async def release_waiting(session: AsyncSession, workspace_id: int, host_id: int) -> None:
    """A new gpu_device table: days that waited for GPU names, or failed, run again.

    The agent re-sends gpu_device on every run, so this is also the daily retry of a
    failed back-fill; re-running one is harmless, stored ticks are skipped.
    """
    await session.execute(
        text(
            """
            UPDATE archive_backfills b SET
                status = CASE WHEN b.status = 'running' THEN b.status ELSE 'pending' END,
                reason = CASE WHEN b.status = 'running' THEN b.reason END,
                attempts = CASE WHEN b.status = 'running' THEN b.attempts ELSE 0 END,
                devices_changed = b.status = 'running',
                requested_at = now(), not_before = NULL
            WHERE b.workspace_id = :w AND b.host_id = :h
              AND b.status IN ('waiting', 'failed', 'running')
              AND (SELECT count(*) FROM archive_objects o
                   WHERE o.workspace_id = b.workspace_id AND o.host_id = b.host_id
                     AND o.day = to_char(b.day, 'YYYY-MM-DD')
                     AND o.table_name IN ('gpu_sample', 'proc_sample')) = 2
            """
        ),
        {"w": workspace_id, "h": host_id},
    )


async def prune(
    session: AsyncSession, principal: tuple[int, int], older_than_days: int, now: datetime
) -> list[str]:
    """Drop the host's daily objects older than N days (never `_full`); their keys.

    Any int is safe: a negative one counts as 0, one reaching past year 1 drops nothing.
    """
    workspace_id, host_id = principal
    today = now.astimezone(UTC).date()
    days = max(0, older_than_days)
    cutoff = today - timedelta(days=days) if days < (today - date.min).days else date.min
    keys = (
        await session.scalars(
            delete(ArchiveObject)
            .where(
                ArchiveObject.workspace_id == workspace_id,
                ArchiveObject.host_id == host_id,
                ArchiveObject.day != FULL,
                ArchiveObject.day < cutoff.isoformat(),
            )
            .returning(ArchiveObject.storage_key)
        )
    ).all()
    await session.execute(
        delete(ArchiveBackfill).where(
            ArchiveBackfill.workspace_id == workspace_id,
            ArchiveBackfill.host_id == host_id,
            ArchiveBackfill.day < cutoff,
        )
    )
    return list(keys)


def backfill_view(job: ArchiveBackfill) -> BackfillOut:
    return BackfillOut(
        date=job.day.isoformat(),
        status=job.status,
        reason=job.reason,
        rows_read=job.rows_read,
        ticks=job.ticks,
        added=job.added,
        skipped=job.skipped,
        skipped_reasons=dict(job.skipped_reasons or {}),
        errors=job.errors,
        error_samples=list(job.error_samples or []),
        attempts=job.attempts,
        requested_at=job.requested_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


async def host_archives(
    session: AsyncSession, workspace_id: int, public_host_id: str
) -> HostArchivesOut:
    """What a host has uploaded and how each day's back-fill went."""
    host = await get_host_row(session, workspace_id, public_host_id)
    objects = await list_archives(session, workspace_id, host.id)
    jobs = (
        await session.scalars(
            select(ArchiveBackfill)
            .where(ArchiveBackfill.workspace_id == workspace_id, ArchiveBackfill.host_id == host.id)
            .order_by(ArchiveBackfill.day)
        )
    ).all()
    return HostArchivesOut(
        host_id=str(host.public_id),  # as the board writes it, however it was asked
        archives=[object_view(o) for o in objects],
        backfills=[backfill_view(j) for j in jobs],
    )
