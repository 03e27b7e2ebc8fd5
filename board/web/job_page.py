"""A job's page: its fields, its allocation per host, its figures, how each GPU stands
for it now, and each allocated GPU's utilization over the job's range (inline SVG, the
host page's chart code; docs/jobs.md "On the pages, and the notices").

The timeline of a job up to two days long is drawn from the raw samples in 5- or
15-minute buckets (as the host page's short ranges are); a longer one from the hourly
utilization report of each host (the API's own body), over the job's last 30 days at most.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.fleet.history import recent_averages
from board.jobs.detail import AllocatedDevice, JobDetail, allocation, job_detail, job_figures
from board.jobs.live import JobNow, jobs_now
from board.reportkit.params import parse_window, parse_zone
from board.reports.utilization_stream import utilization_body
from board.web.charts import LineChart, percent_chart
from board.web.fleet import duration

RAW_UP_TO = timedelta(days=2)
LONGEST = timedelta(days=30)


@dataclass
class HostAllocation:
    host_id: str
    host_name: str
    devices: list[AllocatedDevice]
    chart: LineChart | None = None
    now: dict[int, JobNow] = field(default_factory=dict)  # gpu pk -> standing now


def _floor(at: datetime, step: timedelta) -> datetime:
    seconds = int(step.total_seconds())
    epoch = int(at.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, UTC)


def _ceil(at: datetime, step: timedelta) -> datetime:
    floor = _floor(at, step)
    return floor if floor == at else floor + step


def chart_step(span: timedelta) -> timedelta | None:
    """The raw bucket for a job this long, None for hourly rollups."""
    if span > RAW_UP_TO:
        return None
    return timedelta(minutes=5) if span <= timedelta(hours=6) else timedelta(minutes=15)


async def _timeline(
    db: AsyncSession,
    workspace_id: int,
    tz_name: str,
    host: HostAllocation,
    start: datetime,
    end: datetime,
) -> LineChart:
    """The utilization of the host's GPUs allocated to the job, one line each."""
    _, zone = parse_zone(tz_name)
    step = chart_step(end - start)
    wanted = {d.gpu_index: d for d in host.devices if d.gpu_index is not None}
    series: dict[str, list[tuple[datetime, float | None]]] = {
        f"GPU {i}": [] for i in sorted(wanted)
    }
    host_pk = host.devices[0].host_pk
    if step is not None:
        start, end = _floor(start, step), _ceil(end, step)
        for b in await recent_averages(db, workspace_id, host_pk, start, end, step):
            if b.gpu_index in wanted:
                series[f"GPU {b.gpu_index}"].append((b.start, b.util_pct))
        resolution = f"{int(step.total_seconds() // 60)}-minute averages"
    else:
        step = timedelta(hours=1)
        start, end = _floor(max(start, end - LONGEST), step), _ceil(end, step)
        window = parse_window(start.isoformat(), end.isoformat(), tz_name)
        body = await utilization_body(
            await report_connection(db), workspace_id, window, "gpu", "hour", "json", host_pk
        )
        uuids = {d.gpu_uuid: d.gpu_index for d in host.devices if d.gpu_uuid}
        for r in sorted(orjson.loads(body)["rows"], key=lambda r: r["bucketStart"]):
            if r["gpuUuid"] in uuids:
                at = datetime.fromisoformat(r["bucketStart"])
                series[f"GPU {uuids[r['gpuUuid']]}"].append((at, r["avgUtilPct"]))
        resolution = "hourly averages"
    return percent_chart(
        f"Utilization on {host.host_name}", start, end, zone, series, step, resolution
    )


async def job_view(
    db: AsyncSession, workspace_id: int, tz_name: str, stale_after: int, public_id: str
) -> dict[str, Any]:
    """The job page's context (404 for a job not of this workspace)."""
    conn = await report_connection(db)
    job: JobDetail = await job_detail(conn, workspace_id, public_id)
    now = datetime.now(UTC)
    hosts: dict[int, HostAllocation] = {}
    for device in await allocation(conn, workspace_id, job.pk):
        hosts.setdefault(
            device.host_pk, HostAllocation(device.host_id, device.host_name, [])
        ).devices.append(device)
    in_force = job.started_at <= now and (job.ended_at is None or now < job.ended_at)
    if in_force:
        for found in await jobs_now(conn, workspace_id, stale_after, now):
            if found.run.job_pk == job.pk and found.run.host_id in hosts:
                hosts[found.run.host_id].now[found.run.gpu_id] = found
    end = min(job.ended_at or now, now)
    if end > job.started_at:
        for host in hosts.values():
            if any(d.gpu_index is not None for d in host.devices):
                host.chart = await _timeline(db, workspace_id, tz_name, host, job.started_at, end)
    return {
        "job": job,
        "hosts": list(hosts.values()),
        "figures": await job_figures(conn, workspace_id, job.pk),
        "allocated_gpu_hours": (end - job.started_at).total_seconds()
        / 3600
        * sum(len(h.devices) for h in hosts.values())
        if end > job.started_at
        else 0.0,
        "in_force": in_force,
        "ran_for": duration(job.started_at, end),
        "waste_for": {
            gpu: duration(found.since, now)
            for host in hosts.values()
            for gpu, found in host.now.items()
            if found.since is not None
        },
        "now": now,
    }
