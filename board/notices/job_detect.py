"""The scheduler-jobs part of a detection pass: `job.idle` and its escalation.

board.notices.detect.observe calls `observe_jobs` and adds what it found to the pass, so
`job.idle` gets the episodes, hysteresis, snoozes and outbox of every other condition;
detect_workspace then calls `escalate` for the open ones (docs/notices.md, docs/jobs.md):

- One episode per job run (subject `job:<id>`), not per GPU: a job of eight GPUs that
  runs nothing is one notice, listing the GPUs. Its condition holds while at least one
  GPU allocated to the run now is unused or idle-held (board.jobs.live), since the
  earliest such GPU's `since` (its unbroken run, clipped to the job's start); it is told
  once that has lasted the workspace's jobIdleNoticeMinutes (60), to the job's Linux
  user through the directory (their member's address) and the channels that listen.
- The episode names the GPU wasting longest (its host and GPU: a stale host's episode
  waits; snoozing that GPU snoozes the job's notice).
- Escalation: once the episode has lasted jobIdleEscalateMinutes (105) from its start
  and the condition still holds, `job.idle` is told once more with `escalated: true`, to
  the account's team contact (the team named like the Slurm account, else the job
  user's team in the directory) and the workspace's admins; they are told the
  `.resolved` too.
- It ends (`job.idle.resolved`, after the pass's 2-minute hysteresis) when no GPU of
  the job is unused or idle-held any more: they turned active or foreign, or the job
  ended (its allocation is no longer in force).
- A GPU on a host inside a maintenance window counts for nothing: a job whose wasting
  GPUs are all in a window raises no notice.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.directory.teams import contacts
from board.jobs.live import JobNow, jobs_now
from board.notices.events import enqueue, iso
from board.notices.health_detect import Found, HostRow, WorkspaceLike

KIND = "job.idle"


class JobWorkspace(WorkspaceLike, Protocol):
    """A workspace as the health detector reads it, with the job notice thresholds."""

    @property
    def job_idle_minutes(self) -> int: ...
    @property
    def job_escalate_minutes(self) -> int: ...


def job_link(public_url: str | None, slug: str, public_id: str) -> str | None:
    """The job's page, from ids only."""
    if not public_url:
        return None
    return f"{public_url.rstrip('/')}/w/{slug}/jobs/{public_id}"


async def observe_jobs(
    session: AsyncSession,
    ws: JobWorkspace,
    now: datetime,
    hosts: Sequence[HostRow],
    gpus: Mapping[int, tuple[Any, ...]],
    directory: Mapping[str, str],
    in_maintenance: set[int],
    public_url: str | None,
) -> list[Found]:
    """The job.idle conditions holding at `now` (read only).

    `hosts`: the pass's host rows (id, public id, display name, hostname, …); `gpus`:
    gpu id -> (uuid, index, name); `directory`: Linux user -> member email."""
    conn = await report_connection(session)
    by_job: dict[int, list[JobNow]] = defaultdict(list)
    for found in await jobs_now(conn, ws.id, ws.stale_after_seconds, now):
        if found.run.host_id not in in_maintenance:
            by_job[found.run.job_pk].append(found)
    host_of = {int(h[0]): h for h in hosts}
    workspace = {"slug": ws.slug, "name": ws.name}
    conditions: list[Found] = []
    for job_pk, runs in by_job.items():
        wasting = sorted(
            (r for r in runs if r.wasting and r.since is not None),
            key=lambda r: (r.since, r.run.host_id, r.run.gpu_id),
        )
        if not wasting:
            continue
        first = wasting[0]
        run = first.run
        assert first.since is not None
        emails = [directory[run.linux_user]] if run.linux_user in directory else []

        def where(r: JobNow) -> tuple[dict[str, Any], dict[str, Any]]:
            host = host_of.get(r.run.host_id)
            uuid, index, name = gpus.get(r.run.gpu_id, (r.run.gpu_uuid, None, None))
            shown_host = {
                "hostId": str(host[1]) if host else None,
                "displayName": host[2] if host else None,
                "hostname": host[3] if host else None,
            }
            return shown_host, {"uuid": uuid, "index": index, "name": name}

        host, gpu = where(first)
        data: dict[str, Any] = {
            "workspace": workspace,
            "host": host,
            "gpu": gpu,
            "linuxUsers": [run.linux_user],
            "memberEmails": emails,
            "since": iso(first.since),
            "job": {
                "cluster": run.cluster,
                "jobId": run.job_id,
                "publicId": str(run.public_id),
                "user": run.linux_user,
                "account": run.account,
                "partition": run.partition,
                "name": run.name,
                "startedAt": iso(run.started_at),
            },
            "gpus": [
                {
                    "host": where(r)[0],
                    "gpu": where(r)[1],
                    "standing": r.standing,
                    "since": iso(r.since) if r.since else None,
                }
                for r in wasting
            ],
            "escalated": False,
            "escalatedTo": [],
            "url": job_link(public_url, ws.slug, str(run.public_id)),
        }
        conditions.append(
            Found(
                KIND,
                f"job:{job_pk}",
                run.host_id,
                run.gpu_id,
                first.since,
                timedelta(minutes=ws.job_idle_minutes),
                data,
                emails,
            )
        )
    return conditions


async def _account_contact(session: AsyncSession, ws_id: int, account: str, user: str) -> list[str]:
    """The contact of the team named like the Slurm account, else of the job user's team."""
    conn = await report_connection(session)
    contact_of = await contacts(conn, ws_id)
    if account in contact_of:
        return [contact_of[account]]
    cur = await conn.execute(
        "SELECT team FROM directory_entries WHERE workspace_id = %s AND linux_user = %s",
        [ws_id, user],
    )
    row = await cur.fetchone()
    team = row[0] if row else None
    return [contact_of[team]] if team in contact_of else []


async def _admins(session: AsyncSession, ws_id: int) -> list[str]:
    rows = await session.execute(
        text(
            "SELECT u.email FROM memberships m JOIN users u ON u.id = m.user_id "
            "WHERE m.workspace_id = :ws AND m.role = 'admin' ORDER BY u.email"
        ),
        {"ws": ws_id},
    )
    return [str(r[0]) for r in rows.all()]


async def escalate(
    session: AsyncSession,
    ws: JobWorkspace,
    now: datetime,
    holding: Callable[[str], bool],
    *,
    mail: bool,
) -> list[str]:
    """Tell `job.idle` once more, escalated, for each open episode told to its user that
    has lasted jobIdleEscalateMinutes and still holds (`holding(subject)`); the event
    types told."""
    due = (
        await session.execute(
            text(
                "SELECT id, subject, gpu_id, data FROM notice_episodes "
                "WHERE workspace_id = :ws AND kind = :kind AND closed_at IS NULL "
                "AND notified AND since <= :due "
                "AND NOT coalesce((data->>'escalated')::boolean, false) ORDER BY id"
            ),
            {
                "ws": ws.id,
                "kind": KIND,
                "due": now - timedelta(minutes=ws.job_escalate_minutes),
            },
        )
    ).all()
    told: list[str] = []
    admins: list[str] | None = None
    for episode_id, subject, gpu_id, data in due:
        if not holding(subject):
            continue  # absent this pass: it may be ending (hysteresis)
        if admins is None:
            admins = await _admins(session, ws.id)
        job = data.get("job") or {}
        contact = await _account_contact(
            session, ws.id, str(job.get("account", "")), str(job.get("user", ""))
        )
        people = sorted(set(contact + admins))
        escalated = {**data, "escalated": True, "escalatedTo": people}
        await session.execute(
            text(
                "UPDATE notice_episodes SET data = CAST(:data AS jsonb) "
                "WHERE workspace_id = :ws AND id = :id"
            ),
            {"data": json.dumps(escalated), "ws": ws.id, "id": episode_id},
        )
        await enqueue(
            session, ws.id, KIND, escalated, now, gpu_id=gpu_id, people=people if mail else []
        )
        told.append(f"{KIND}.escalated")
    return told
