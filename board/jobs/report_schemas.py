"""The jobs report as the API shows it (`GET …/reports/jobs`, docs/jobs.md).

The envelope is typed; rows are built as plain dicts (board.jobs.report), so the row
model below documents them for `/docs`. Field order is the wire order.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from board.readmodels import IsoTime, ReadModel


class JobsFigures(ReadModel):
    """What every row and the totals carry: GPU-hours (UTC hours, 6 decimals)."""

    # The allocations' ranges × GPUs, clipped to the window (and to now), observed or not.
    allocated_gpu_hours: float
    # Of that, the time the board observed the GPU; active + idleHeld + foreign + unused.
    covered_gpu_hours: float
    active_gpu_hours: float
    idle_held_gpu_hours: float
    foreign_gpu_hours: float
    unused_gpu_hours: float
    # idleHeld + unused.
    wasted_gpu_hours: float
    # active / covered (null when covered is 0).
    efficiency: float | None
    # Utilization averaged over covered time (null when covered is 0).
    avg_util_pct: float | None
    # The most GPU memory any of its GPUs had in use in a covered hour (MiB).
    max_memory_used_mb: int | None


class JobsReportRow(JobsFigures):
    """One row: the key fields of its groupBy (only those), then its figures."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=False)

    cluster: str | None = None
    job_id: str | None = None
    # The run's id in links (`/w/{slug}/jobs/{publicId}`).
    public_id: str | None = None
    user: str | None = None
    account: str | None = None
    # groupBy=account: the directory's team of the account (null: none set).
    team: str | None = None
    partition: str | None = None
    name: str | None = None
    state: str | None = None
    started_at: IsoTime | None = None
    ended_at: IsoTime | None = None
    day: str | None = None


class JobsReportHead(ReadModel):
    from_: IsoTime = Field(alias="from")
    to: IsoTime
    group_by: str
    tz: str
    hour_alignment: str | None
    sort: str
    # The filters as given (null: every user, every account).
    user: str | None
    account: str | None
    # At most this many rows are sent (the first in `sort` order); `rowCount` is how
    # many there are, and the totals are over all of them.
    row_limit: int
    row_count: int
    truncated: bool


class JobsReportOut(JobsReportHead):
    rows: list[JobsReportRow]
    totals: JobsFigures
