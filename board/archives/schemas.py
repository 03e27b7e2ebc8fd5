"""What the archive endpoints answer: the agent's list, upload and prune results, and
the host's archive status with its back-fills (`GET …/hosts/{hostId}/archives`).

The field order here is the wire order (board.readmodels)."""

from __future__ import annotations

from typing import Literal

from board.readmodels import IsoTime, ReadModel

BackfillStatus = Literal["waiting", "pending", "running", "done", "failed"]


class ArchiveOut(ReadModel):
    """One stored object, named as the agent named it."""

    date: str  # YYYY-MM-DD, or _full for a table archived whole
    table: str
    size_bytes: int
    rows: int
    uploaded_at: IsoTime


class ArchiveListOut(ReadModel):
    archives: list[ArchiveOut]


class UploadOut(ReadModel):
    date: str
    table: str
    rows: int
    size_bytes: int
    # The day's back-fill after this upload; null for a table archived whole.
    backfill: BackfillStatus | None


class PruneOut(ReadModel):
    deleted: int


class BackfillOut(ReadModel):
    """How one day's back-fill went (or goes): ticks read, added, skipped and why."""

    date: str
    status: BackfillStatus
    reason: str | None
    rows_read: int
    ticks: int
    added: int
    skipped: int
    skipped_reasons: dict[str, int]
    errors: int
    error_samples: list[str]
    attempts: int
    requested_at: IsoTime
    started_at: IsoTime | None
    finished_at: IsoTime | None


class HostArchivesOut(ReadModel):
    host_id: str
    archives: list[ArchiveOut]
    backfills: list[BackfillOut]
