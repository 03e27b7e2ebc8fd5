"""The hosts people see: newest state, freshness, rejected pushes, availability."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from board.auth.deps import WorkspaceContext
from board.db.connection import report_connection
from board.fleet.latest import newest_gpus, state_since
from board.fleet.schemas import (
    GpuNow,
    GpuOut,
    GpuProcessCountOut,
    HostNow,
    HostOut,
    RejectedPushOut,
)
from board.fleet.search import search_hosts, sort_hosts
from board.hosts.freshness import freshness
from board.hosts.models import Host, HostRejection
from board.hosts.service import get_host_row
from board.jobs.live import JobNow, RunsInForce, job_now, job_out, run_named, runs_in_force
from board.reservations.availability import (
    InForce,
    availability,
    bookings_in_force,
    gpu_availability,
)
from board.rollups.crediting import compute_holders, named_jobs

REJECTIONS_WINDOW = timedelta(hours=24)


def _shown_gpu(gpu: GpuOut, with_processes: bool) -> GpuOut | GpuProcessCountOut:
    if with_processes:
        return gpu
    fields = gpu.model_dump(exclude={"processes"}, by_alias=False)
    return GpuProcessCountOut(**fields, process_count=len(gpu.processes))


def _job(host_id: int, gpu: GpuOut, observed: bool, jobs: RunsInForce) -> JobNow | None:
    """The run in force on the GPU (the oldest its processes may be: run_named),
    standing against its newest state."""
    runs = jobs.get((host_id, gpu.uuid))
    if not runs:
        return None
    state = gpu.usage_state if observed else None
    processes = [(p.linux_user, p.type, p.job_id) for p in gpu.processes]
    holders = compute_holders((user, ptype) for user, ptype, _ in processes)
    pairs = named_jobs(processes)
    return job_now(run_named(runs, pairs), state, holders, gpu.state_since, pairs)


def _with_availability(
    gpu: GpuOut,
    host_id: int,
    observed: bool,
    in_force: InForce,
    jobs: RunsInForce,
    with_processes: bool,
) -> GpuOut:
    processes = [(p.linux_user, p.type) for p in gpu.processes]
    shown, booking = gpu_availability(
        host_id, gpu.uuid, observed, gpu.usage_state, processes, in_force
    )
    update: dict[str, object] = {"availability": shown, "reservation": booking}
    job = _job(host_id, gpu, observed, jobs)
    if job is not None:
        update["job"] = job_out(job, with_processes)
    return gpu.model_copy(update=update)


def _freshness(host: Host, ctx: WorkspaceContext, now: datetime) -> str:
    return freshness(
        host.latest_observed_at,
        host.latest_collection_status,
        now,
        ctx.workspace.stale_after_seconds,
    )


def _host_out(
    host: Host,
    fresh: str,
    rejections: list[RejectedPushOut],
    gpus: list[GpuOut | GpuProcessCountOut],
) -> HostOut:
    return HostOut(
        host_id=str(host.public_id),
        display_name=host.display_name,
        hostname=host.hostname,
        freshness=fresh,
        last_seen_at=host.latest_observed_at,
        last_received_at=host.latest_received_at,
        collection_status=host.latest_collection_status,
        errors=list(host.latest_errors or []),
        agent_version=host.agent_version,
        driver_version=host.driver_version,
        token_prefix=host.agent_token_prefix,
        enrolled_at=host.enrolled_at,
        revoked_at=host.revoked_at,
        rejected_pushes=rejections,
        gpus=gpus,
    )


def _view(
    host: Host,
    ctx: WorkspaceContext,
    now: datetime,
    rejections: list[RejectedPushOut],
    gpus: list[GpuOut],
    in_force: InForce,
    jobs: RunsInForce,
) -> HostOut:
    fresh = _freshness(host, ctx, now)
    observed = fresh not in ("stale", "never")
    gpus = [
        _with_availability(g, host.id, observed, in_force, jobs, ctx.sees_processes) for g in gpus
    ]
    return _host_out(host, fresh, rejections, [_shown_gpu(g, ctx.sees_processes) for g in gpus])


async def _rejections(
    session: AsyncSession, workspace_id: int, host_ids: list[int], now: datetime
) -> dict[int, list[RejectedPushOut]]:
    rows = await session.execute(
        select(
            HostRejection.host_id,
            HostRejection.reason,
            func.sum(HostRejection.count),
            func.max(HostRejection.last_at),
            # The newest detail of the reason in the window.
            func.max(func.concat(HostRejection.last_at, "\x1f", HostRejection.last_detail)),
        )
        .where(
            HostRejection.workspace_id == workspace_id,
            HostRejection.host_id.in_(host_ids),
            HostRejection.hour_start >= now - REJECTIONS_WINDOW - timedelta(hours=1),
        )
        .group_by(HostRejection.host_id, HostRejection.reason)
        .order_by(HostRejection.reason)
    )
    found: dict[int, list[RejectedPushOut]] = defaultdict(list)
    for host_id, reason, count, last_at, last in rows.all():
        found[host_id].append(
            RejectedPushOut(
                reason=reason,
                count=int(count),
                last_at=last_at,
                last_detail=str(last).split("\x1f", 1)[-1],
            )
        )
    return found


# Each host's newest GPUs as newest_gpus built them, kept in this process between reads:
# workspace id -> host id -> (what ingest changes when it moves the host's newest
# observation forward, the GPUs). A fleet page reads 300 hosts of which a few pushed
# since the last read; each read checks every host's key against its row just read from
# the database, so every process (`serve --workers 2`) sees a push at its next read,
# with no message between them. The models are frozen and shared, never changed.
_NewestKey = tuple[uuid.UUID, datetime | None, datetime | None, str | None]
_newest_kept: dict[int, dict[int, tuple[_NewestKey, list[GpuOut]]]] = {}
# Kept only for hosts observed this recently: a host silent for longer than the raw
# retention has no samples left and shows no GPUs, so a silent host is read every time.
KEEP_NEWEST_FOR = timedelta(hours=1)


def _newest_key(host: Host) -> _NewestKey:
    # public_id: a host id reused by another database (tests, a restore) is another key.
    return (host.public_id, host.latest_observed_at, host.latest_received_at, host.latest_tick)


async def _newest_gpus_kept(
    session: AsyncSession, workspace_id: int, hosts: list[Host], now: datetime
) -> dict[int, list[GpuOut]]:
    """host id -> its newest GPUs (newest_gpus), read only for hosts whose newest
    observation moved since this process last read them."""
    kept = _newest_kept.get(workspace_id, {})
    found: dict[int, list[GpuOut]] = {}
    changed: list[Host] = []
    for host in hosts:
        entry = kept.get(host.id)
        if entry is not None and entry[0] == _newest_key(host):
            found[host.id] = entry[1]
        else:
            changed.append(host)
    if changed:
        since = state_since(h.latest_tick for h in changed)
        read = await newest_gpus(session, workspace_id, [h.id for h in changed], since)
        for host in changed:
            found[host.id] = read.get(host.id, [])
    # Only this read's hosts stay: a revoked or deleted host is forgotten.
    _newest_kept[workspace_id] = {
        h.id: (_newest_key(h), found[h.id])
        for h in hosts
        if h.latest_observed_at is not None and now - h.latest_observed_at < KEEP_NEWEST_FOR
    }
    return found


@dataclass(frozen=True)
class _Newest:
    """What the hosts list reads: the host rows and their newest GPUs, rejections, bookings."""

    hosts: list[Host]
    now: datetime
    rejections: dict[int, list[RejectedPushOut]]
    gpus: dict[int, list[GpuOut]]
    in_force: InForce
    jobs: RunsInForce


async def _read_newest(session: AsyncSession, ctx: WorkspaceContext) -> _Newest:
    hosts = list(
        (
            await session.scalars(
                select(Host)
                .where(Host.workspace_id == ctx.workspace_id, Host.revoked_at.is_(None))
                .order_by(Host.display_name, Host.id)
            )
        ).all()
    )
    now = datetime.now(UTC)
    ids = [h.id for h in hosts]
    rejections = await _rejections(session, ctx.workspace_id, ids, now)
    gpus = await _newest_gpus_kept(session, ctx.workspace_id, hosts, now)
    conn = await report_connection(session)
    in_force = await bookings_in_force(conn, ctx.workspace_id, ids, now)
    jobs = await runs_in_force(conn, ctx.workspace_id, ids, now)
    return _Newest(hosts, now, rejections, gpus, in_force, jobs)


async def list_hosts(
    session: AsyncSession, ctx: WorkspaceContext, q: str = "", sort: str = "name"
) -> list[HostOut]:
    """The workspace's hosts by name, narrowed by a search and ordered (board.fleet.search)."""
    read = await _read_newest(session, ctx)
    views = [
        _view(
            h,
            ctx,
            read.now,
            read.rejections.get(h.id, []),
            read.gpus.get(h.id, []),
            read.in_force,
            read.jobs,
        )
        for h in read.hosts
    ]
    return sort_hosts(search_hosts(views, q), sort)


def _gpu_now(
    host_id: int, gpu: GpuOut, observed: bool, in_force: InForce, jobs: RunsInForce
) -> GpuNow:
    holders = compute_holders((p.linux_user, p.type) for p in gpu.processes)
    booking = in_force.get((host_id, gpu.uuid))
    users = frozenset(booking.linux_users) if booking is not None else None
    shown = availability(observed, gpu.usage_state, holders, users)
    return GpuNow(gpu, holders, shown, booking, _job(host_id, gpu, observed, jobs))


async def fleet_hosts(session: AsyncSession, ctx: WorkspaceContext) -> list[HostNow]:
    """The workspace's hosts by name with their newest GPUs, for the fleet and people pages.

    The same values as list_hosts, without a copy of each GPU's model to add its
    availability (at 2,400 GPUs the copies and the hosts' validation of them cost more
    than the page's own work). Processes are in each GpuOut: the caller shows them
    only to roles that may see them (WorkspaceContext.sees_processes).
    """
    read = await _read_newest(session, ctx)
    found: list[HostNow] = []
    for host in read.hosts:
        fresh = _freshness(host, ctx, read.now)
        observed = fresh not in ("stale", "never")
        gpus = [
            _gpu_now(host.id, g, observed, read.in_force, read.jobs)
            for g in read.gpus.get(host.id, [])
        ]
        found.append(HostNow(_host_out(host, fresh, read.rejections.get(host.id, []), []), gpus))
    return found


async def view_of(session: AsyncSession, ctx: WorkspaceContext, host: Host) -> HostOut:
    """One host row as the API shows it (the host page also needs the row itself)."""
    now = datetime.now(UTC)
    rejections = await _rejections(session, ctx.workspace_id, [host.id], now)
    since = state_since([host.latest_tick])
    gpus = await newest_gpus(session, ctx.workspace_id, [host.id], since)
    conn = await report_connection(session)
    booked = await bookings_in_force(conn, ctx.workspace_id, [host.id], now)
    jobs = await runs_in_force(conn, ctx.workspace_id, [host.id], now)
    return _view(host, ctx, now, rejections.get(host.id, []), gpus.get(host.id, []), booked, jobs)


async def get_host(session: AsyncSession, ctx: WorkspaceContext, host_id: str) -> HostOut:
    return await view_of(session, ctx, await get_host_row(session, ctx.workspace_id, host_id))
