"""A host's recent utilization and memory per GPU, averaged into short buckets from the
raw history (the host page's 6 h and 24 h charts; longer ranges read the hourly rollups
through the utilization report instead)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

# The bucket starts on the UTC epoch grid of `step`, so equal windows give equal buckets.
_RECENT = text(
    """
    SELECT g.gpu_index,
           to_timestamp(floor(extract(epoch FROM r.observed_at) / :step) * :step) AS bucket,
           avg(g.util_pct)::float8 AS util,
           avg(100.0 * g.memory_used_mb / nullif(g.memory_total_mb, 0))::float8 AS memory
    FROM raw_observations(:ws, :host, :start, :end) r
    CROSS JOIN LATERAL unnest(r.gpu_index, r.gpu_util_pct, r.gpu_memory_used_mb,
                              r.gpu_memory_total_mb)
         AS g(gpu_index, util_pct, memory_used_mb, memory_total_mb)
    WHERE r.observed_at < :end
    GROUP BY g.gpu_index, bucket
    ORDER BY g.gpu_index, bucket
    """
)


@dataclass(frozen=True, slots=True)
class BucketAverage:
    gpu_index: int
    start: datetime
    util_pct: float | None
    memory_used_pct: float | None


async def recent_averages(
    session: AsyncSession,
    workspace_id: int,
    host_id: int,
    start: datetime,
    end: datetime,
    step: timedelta,
) -> list[BucketAverage]:
    """Per GPU index and bucket of `step` in [start, end): mean utilization and memory %."""
    rows = await session.execute(
        _RECENT,
        {
            "ws": workspace_id,
            "host": host_id,
            "start": start,
            "end": end,
            "step": int(step.total_seconds()),
        },
    )
    return [BucketAverage(i, at, util, memory) for i, at, util, memory in rows.all()]
