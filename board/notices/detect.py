"""Episodes: from the newest state and the clock, which conditions start and end.

A pass per workspace runs in one transaction under a per-workspace advisory lock (a
second board process skips a workspace being looked at), reads the hosts' newest ticks,
the bookings in force and the open episodes, and opens or closes episodes; each open or
close writes its notice to the outbox in that same transaction (board.notices.events).

Rules (docs/notices.md):
- an episode opens when its condition has held for at least its threshold, measured
  from the data (`stateSince`, the booking's start, the last observation), not from
  when the board happened to look;
- it closes only once the condition has been absent for CLOSE_AFTER at every pass in
  between (hysteresis): a card flickering around the threshold stays in one episode;
- a GPU of a stale host is neither idle-held nor not: its episodes wait;
- a GPU snoozed at the open gets an episode that is told neither when it opens nor
  when it ends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.hosts.freshness import freshness
from board.notices.events import enqueue, iso
from board.notices.health_detect import observe_health
from board.notices.job_detect import escalate, observe_jobs
from board.reservations.availability import availability, bookings_in_force
from board.rollups.crediting import from_us

CLOSE_AFTER = timedelta(minutes=2)
# pg_try_advisory_xact_lock key of a workspace's pass: this base plus the workspace id.
LOCK_BASE = 0x6E6F74 << 32  # "not"


@dataclass(frozen=True)
class WorkspaceRow:
    id: int
    slug: str
    name: str
    stale_after_seconds: int
    idle_held_minutes: int
    reservation_idle_minutes: int
    timezone: str
    digest_hour: int | None
    job_idle_minutes: int = 60
    job_escalate_minutes: int = 105


@dataclass
class Condition:
    """A condition holding now, with what its notice says."""

    kind: str
    subject: str
    host_id: int
    gpu_id: int | None
    since: datetime
    threshold: timedelta
    data: dict[str, Any]
    people: list[str]


@dataclass
class Seen:
    """What one pass saw: conditions holding, and subjects it cannot judge (stale hosts)."""

    conditions: dict[tuple[str, str], Condition]
    unknown: set[str]
    # Maintenance windows in force now or starting within a day (the digest lists them).
    maintenance: list[dict[str, Any]] = field(default_factory=list)


WORKSPACES = text(
    """
    SELECT id, slug, name, stale_after_seconds, idle_held_notice_minutes,
           reservation_idle_notice_minutes, timezone, digest_hour,
           job_idle_notice_minutes, job_idle_escalate_minutes
    FROM workspaces ORDER BY id
    """
)


async def workspaces(session: AsyncSession) -> list[WorkspaceRow]:
    return [WorkspaceRow(*row) for row in (await session.execute(WORKSPACES)).all()]


async def try_lock(session: AsyncSession, workspace_id: int) -> bool:
    got = await session.scalar(
        text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": LOCK_BASE + workspace_id}
    )
    return bool(got)


def gpu_link(public_url: str | None, slug: str, host_public: str, index: object) -> str | None:
    """The GPU on the board, from ids only (the host's id the board made, the GPU's index):
    a uuid or name is what a host reported, and in a link it wrote Slack markup and mail
    lines of its own."""
    if not public_url:
        return None
    anchor = f"#gpu-{index}" if isinstance(index, int) and not isinstance(index, bool) else ""
    return f"{public_url.rstrip('/')}/w/{slug}/hosts/{host_public}{anchor}"


async def _directory(session: AsyncSession, workspace_id: int) -> dict[str, str]:
    rows = await session.execute(
        text(
            "SELECT d.linux_user, u.email FROM directory_entries d "
            "JOIN users u ON u.id = d.user_id WHERE d.workspace_id = :ws"
        ),
        {"ws": workspace_id},
    )
    return dict(rows.all())


async def observe(
    session: AsyncSession,
    ws: WorkspaceRow,
    now: datetime,
    public_url: str | None,
) -> Seen:
    """The conditions holding at `now` in one workspace (read only)."""
    hosts = (
        await session.execute(
            text(
                "SELECT id, public_id, display_name, hostname, latest_observed_at, "
                "latest_collection_status, latest_tick FROM hosts "
                "WHERE workspace_id = :ws AND revoked_at IS NULL ORDER BY id"
            ),
            {"ws": ws.id},
        )
    ).all()
    gpus = {
        gpu_id: (uuid, index, name)
        for gpu_id, uuid, index, name in (
            await session.execute(
                text("SELECT id, uuid, gpu_index, name FROM gpus WHERE workspace_id = :ws"),
                {"ws": ws.id},
            )
        ).all()
    }
    directory = await _directory(session, ws.id)
    conn = await report_connection(session)
    bookings = await bookings_in_force(conn, ws.id, [h[0] for h in hosts], now)
    workspace = {"slug": ws.slug, "name": ws.name}
    seen = Seen({}, set())

    def add(condition: Condition) -> None:
        seen.conditions[(condition.kind, condition.subject)] = condition

    for host_id, public, display, hostname, observed_at, status, tick in hosts:
        host = {"hostId": str(public), "displayName": display, "hostname": hostname}
        state = freshness(observed_at, status, now, ws.stale_after_seconds)
        base: dict[str, Any] = {"workspace": workspace, "host": host, "gpu": None, "linuxUsers": []}
        if state == "stale":
            add(
                Condition(
                    "host.stale",
                    f"host:{host_id}",
                    host_id,
                    None,
                    observed_at + timedelta(seconds=ws.stale_after_seconds),
                    timedelta(0),
                    {**base, "memberEmails": [], "lastSeenAt": iso(observed_at)},
                    [],
                )
            )
        elif state == "error":
            add(
                Condition(
                    "host.error",
                    f"host:{host_id}",
                    host_id,
                    None,
                    observed_at,
                    timedelta(0),
                    {**base, "memberEmails": [], "lastSeenAt": iso(observed_at)},
                    [],
                )
            )
        ticked = json.loads(tick) if tick else []
        if state in ("stale", "never"):
            seen.unknown.update(f"gpu:{g[0]}" for g in ticked)
            seen.unknown.add(f"host-gpus:{host_id}")
            continue
        for gpu_id, gpu_state, _util, _used, _total, holders, *rest in ticked:
            uuid, index, name = gpus.get(gpu_id, (str(gpu_id), None, None))
            since = from_us(int(rest[0])) if rest else None
            users = sorted(set(holders))
            gpu = {"uuid": uuid, "index": index, "name": name}
            link = gpu_link(public_url, ws.slug, str(public), index)
            if gpu_state == "idle_held" and since is not None:
                emails = sorted({directory[u] for u in users if u in directory})
                add(
                    Condition(
                        "gpu.idle_held",
                        f"gpu:{gpu_id}",
                        host_id,
                        gpu_id,
                        since,
                        timedelta(minutes=ws.idle_held_minutes),
                        {
                            **base,
                            "gpu": gpu,
                            "linuxUsers": users,
                            "memberEmails": emails,
                            "since": iso(since),
                            "url": link,
                        },
                        emails,
                    )
                )
            booking = bookings.get((host_id, uuid))
            if booking is None or since is None:
                continue
            found = availability(True, gpu_state, tuple(holders), frozenset(booking.linux_users))
            if found != "reserved_idle":
                continue
            # Idle since the later of the booking's start and the GPU's current state.
            idle_since = max(since, booking.start)
            add(
                Condition(
                    "reservation.idle",
                    f"reservation:{booking.reservation_id}:gpu:{gpu_id}",
                    host_id,
                    gpu_id,
                    idle_since,
                    timedelta(minutes=ws.reservation_idle_minutes),
                    {
                        **base,
                        "gpu": gpu,
                        "linuxUsers": users,
                        "memberEmails": [booking.member_email],
                        "since": iso(idle_since),
                        "reservation": {
                            "reservationId": booking.reservation_id,
                            "memberEmail": booking.member_email,
                            "start": iso(booking.start),
                            "end": iso(booking.end),
                        },
                        "url": link,
                    },
                    [booking.member_email],
                )
            )
    # Missing and hot GPUs, maintenance windows (board.notices.health_detect).
    health = await observe_health(
        session, ws, now, hosts, lambda host, index: gpu_link(public_url, ws.slug, host, index)
    )
    for holding in health.conditions:
        add(Condition(*holding))
    # Jobs whose allocated GPUs sit unused or idle-held (board.notices.job_detect).
    jobs = await observe_jobs(
        session, ws, now, hosts, gpus, directory, health.in_maintenance, public_url
    )
    for holding in jobs:
        add(Condition(*holding))
    seen.maintenance = health.maintenance
    seen.unknown.update(health.waiting)
    seen.conditions = {
        k: c for k, c in seen.conditions.items() if c.host_id not in health.in_maintenance
    }
    for condition in seen.conditions.values():
        condition.data.setdefault("since", iso(condition.since))
    return seen


@dataclass
class PassResult:
    seen: Seen
    opened: list[str]
    closed: list[str]


async def detect_workspace(
    session: AsyncSession,
    ws: WorkspaceRow,
    now: datetime,
    *,
    public_url: str | None,
    mail: bool,
) -> PassResult:
    """One pass over one workspace, in the session's transaction (the caller commits).

    `mail`: whether the board sends mail (people are mailed only then).
    """
    seen = await observe(session, ws, now, public_url)
    snoozed = {
        gpu_id
        for (gpu_id,) in (
            await session.execute(
                text("SELECT gpu_id FROM notice_snoozes WHERE workspace_id = :ws AND until > :now"),
                {"ws": ws.id, "now": now},
            )
        ).all()
    }
    open_rows = (
        await session.execute(
            text(
                "SELECT id, kind, subject, host_id, gpu_id, absent_since, notified, data "
                "FROM notice_episodes WHERE workspace_id = :ws AND closed_at IS NULL FOR UPDATE"
            ),
            {"ws": ws.id},
        )
    ).all()
    result = PassResult(seen, [], [])
    open_keys = set()
    for episode_id, kind, subject, host_id, gpu_id, absent_since, notified, data in open_rows:
        key = (kind, subject)
        open_keys.add(key)
        if key in seen.conditions:
            if absent_since is not None:
                await _set_absent(session, ws.id, episode_id, None)
            continue
        if f"maintenance:{host_id}" in seen.unknown or f"{kind}:{host_id}" in seen.unknown:
            continue  # in a maintenance window, or its host cannot tell (health_detect)
        gpu_subject = f"gpu:{gpu_id}" if gpu_id is not None else None
        waits = gpu_subject in seen.unknown or f"host-gpus:{host_id}" in seen.unknown
        if gpu_id is not None and waits:
            continue  # its host is stale: neither present nor absent
        if absent_since is None:
            await _set_absent(session, ws.id, episode_id, now)
            continue
        if now - absent_since < CLOSE_AFTER:
            continue
        await session.execute(
            text(
                "UPDATE notice_episodes SET closed_at = :now WHERE workspace_id = :ws AND id = :id"
            ),
            {"now": now, "ws": ws.id, "id": episode_id},
        )
        result.closed.append(f"{kind}.resolved")
        if notified:
            ended = {**data, "endedAt": iso(absent_since)}
            # Whoever was told: the holders' members, and those an escalation told.
            told = [*data.get("memberEmails", []), *data.get("escalatedTo", [])]
            people = told if mail else []
            await enqueue(
                session, ws.id, f"{kind}.resolved", ended, now, gpu_id=gpu_id, people=people
            )
    for key, condition in seen.conditions.items():
        if key in open_keys or now - condition.since < condition.threshold:
            continue
        notify = condition.gpu_id not in snoozed
        inserted = await session.scalar(
            text(
                "INSERT INTO notice_episodes (workspace_id, kind, subject, host_id, gpu_id, "
                "since, opened_at, notified, data) VALUES (:ws, :kind, :subject, :host, :gpu, "
                ":since, :now, :notified, CAST(:data AS jsonb)) "
                "ON CONFLICT (workspace_id, kind, subject) WHERE closed_at IS NULL DO NOTHING "
                "RETURNING id"
            ),
            {
                "ws": ws.id,
                "kind": condition.kind,
                "subject": condition.subject,
                "host": condition.host_id,
                "gpu": condition.gpu_id,
                "since": condition.since,
                "now": now,
                "notified": notify,
                "data": json.dumps(condition.data),
            },
        )
        if inserted is None or not notify:
            continue
        result.opened.append(condition.kind)
        await enqueue(
            session,
            ws.id,
            condition.kind,
            condition.data,
            now,
            gpu_id=condition.gpu_id,
            people=condition.people if mail else [],
        )
    result.opened += await escalate(
        session, ws, now, lambda subject: ("job.idle", subject) in seen.conditions, mail=mail
    )
    return result


async def _set_absent(
    session: AsyncSession, workspace_id: int, episode_id: int, at: datetime | None
) -> None:
    await session.execute(
        text("UPDATE notice_episodes SET absent_since = :at WHERE workspace_id = :ws AND id = :id"),
        {"at": at, "ws": workspace_id, "id": episode_id},
    )
