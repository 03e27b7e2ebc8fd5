"""The jobs in force now: which job holds each GPU, and how the GPU stands for it.

A job's allocated device is matched to a GPU when read (docs/jobs.md): the GPU's minor
number when its agent reported one, else its index. A run is in force at `now` when its
`during` ([startedAt, endedAt), unbounded while it runs) contains `now`.

How a GPU stands for a job now follows accounting.md "Scheduler jobs", applied to the
host's newest observation (the same rule the figures credit per interval):

- `active`: the job's Linux user holds the GPU and it is active;
- `idle_held`: the job's user holds it, and it is idle-held;
- `foreign`: someone else holds it (or a held card names no process: `unknown`);
- `unused`: no compute process at all;
- None: not observed (the host is stale or never reported, or this GPU is not in its
  newest observation): nobody can say.

`since` is when that standing began for the job: the GPU's `stateSince` (the start of
its unbroken run with the same state and, for a held card, the same holders: see
board.ingest.state_since), or the job's start when the run began before it. For
`unused` and `idle_held` that is the start of the wasting episode the pages and the
`job.idle` notice count from; the episode ends when that run ends (the GPU turns
active, its holders change, a gap longer than maxSampleGap) or the job ends.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg

from board.hosts.freshness import freshness
from board.jobs.crediting import run_claims
from board.readmodels import IsoTime, ReadModel
from board.rollups.crediting import billed_users, from_us

Standing = Literal["active", "idle_held", "foreign", "unused"]
WASTING: tuple[Standing, ...] = ("idle_held", "unused")


@dataclass(frozen=True, slots=True)
class JobRun:
    """One run of a job allocated one GPU now."""

    job_pk: int  # scheduler_jobs.id
    public_id: uuid.UUID
    cluster: str
    job_id: str
    linux_user: str
    account: str
    partition: str
    name: str
    state: str
    started_at: datetime
    host_id: int
    gpu_id: int
    gpu_uuid: str
    raw_job_id: str = ""  # Slurm's own id: what a process's cgroup names

    def claims(self, job_pairs: tuple[tuple[str, str], ...]) -> bool:
        """As the crediting (board.jobs.crediting.run_claims): its user's processes on the
        GPU may be this run's unless every one names another job."""
        return not job_pairs or run_claims(job_pairs, self.linux_user, self.raw_job_id)


@dataclass(frozen=True, slots=True)
class JobNow:
    """A run in force on a GPU and how the GPU stands for it now."""

    run: JobRun
    standing: Standing | None
    since: datetime | None
    # Who else holds the GPU when it is `foreign` (their Linux users), else empty.
    foreign_users: tuple[str, ...] = ()

    @property
    def wasting(self) -> bool:
        return self.standing in WASTING


def standing_of(
    state: str | None, holders: tuple[str, ...], linux_user: str, claimed: bool = True
) -> Standing | None:
    """How a GPU in `state` with compute `holders` stands for a job of `linux_user`;
    None when the GPU is not observed (`state` None). `claimed`: False when the user's
    processes all name another job (JobRun.claims): then they are someone else's."""
    if state is None:
        return None
    users = billed_users(state, holders)
    if not users:
        return "unused"
    if linux_user in users and claimed:
        return "active" if state == "active" else "idle_held"
    return "foreign"


def job_now(
    run: JobRun,
    state: str | None,
    holders: tuple[str, ...],
    state_since: datetime | None,
    job_pairs: tuple[tuple[str, str], ...] = (),
) -> JobNow:
    """`state`: the GPU's counted state in its host's newest observation, None when not
    observed; `state_since`: its stateSince (None when unknown); `job_pairs`: the
    (user, job) its processes name (board.rollups.crediting.named_jobs)."""
    claimed = run.claims(job_pairs)
    standing = standing_of(state, holders, run.linux_user, claimed)
    since = None
    if standing is not None and state_since is not None:
        since = max(state_since, run.started_at)
    if standing != "foreign" or state is None:
        return JobNow(run, standing, since)
    others = tuple(u for u in billed_users(state, holders) if u != run.linux_user or not claimed)
    return JobNow(run, standing, since, others)


def run_named(runs: list[JobRun], job_pairs: tuple[tuple[str, str], ...]) -> JobRun:
    """The run a GPU is shown with: the oldest its processes may be (JobRun.claims), else
    the oldest."""
    return next((run for run in runs if run.claims(job_pairs)), runs[0])


# The end condition follows from `during @> now`; it is there for the planner, which finds
# the runs not ended by `now` in ix_job_gpus_host_end (workspace, host, end of `during`).
# On `during @> now` alone it read every run ever allocated: the fleet page's slowest
# read, growing with the history kept (~250 ms at 200 GPUs with 400 days of jobs).
_IN_FORCE = """
    SELECT j.id, j.public_id, j.cluster, j.job_id, j.linux_user, j.account, j.partition,
           j.name, j.state, j.started_at, jg.host_id, g.id, g.uuid, j.raw_job_id
    FROM job_gpus jg
    JOIN scheduler_jobs j ON j.workspace_id = jg.workspace_id AND j.id = jg.job_id
    JOIN gpus g ON g.workspace_id = jg.workspace_id AND g.host_id = jg.host_id
               AND coalesce(g.minor_number, g.gpu_index) = jg.device
    WHERE jg.workspace_id = %(ws)s AND jg.host_id = ANY(%(hosts)s)
      AND jg.during @> %(now)s::timestamptz
      AND (upper(jg.during) >= %(now)s OR upper(jg.during) IS NULL)
    ORDER BY g.id, j.started_at, j.id
"""

RunsInForce = dict[tuple[int, str], list[JobRun]]  # (host id, GPU uuid) -> runs, oldest first


async def runs_in_force(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_ids: Sequence[int],
    now: datetime,
) -> RunsInForce:
    """(host id, GPU uuid) -> the runs allocated that GPU at `now` (one query; usually
    one run a GPU, several when a scheduler shares a GPU between jobs)."""
    cur = await conn.execute(_IN_FORCE, {"ws": workspace_id, "hosts": list(host_ids), "now": now})
    found: RunsInForce = {}
    for row in await cur.fetchall():
        run = JobRun(*row)
        found.setdefault((run.host_id, run.gpu_uuid), []).append(run)
    return found


_HOSTS = """
    SELECT id, latest_observed_at, latest_collection_status, latest_tick
    FROM hosts WHERE workspace_id = %s AND revoked_at IS NULL
"""

Pairs = tuple[tuple[str, str], ...]
Newest = dict[int, tuple[str, tuple[str, ...], datetime | None, Pairs]]


def newest_of_tick(encoded: str | None) -> Newest:
    """gpu id -> (state, compute holders, stateSince, (user, job) pairs) from a host's kept
    tick (its newest observation, board.ingest.normalize.encode_tick: stateSince in µs as
    7th element, the pairs as 9th when its processes name jobs)."""
    found: Newest = {}
    for gpu in json.loads(encoded) if encoded else ():
        since = from_us(int(gpu[6])) if len(gpu) > 6 and gpu[6] is not None else None
        pairs = tuple((str(u), str(j)) for u, j in gpu[8]) if len(gpu) > 8 else ()
        found[int(gpu[0])] = (str(gpu[1]), tuple(gpu[5]), since, pairs)
    return found


async def jobs_now(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    stale_after_seconds: int,
    now: datetime,
    host_id: int | None = None,
) -> list[JobNow]:
    """Every run in force at `now` on the workspace's hosts (or one host), GPU by GPU,
    with its standing from the host's newest tick (state, holders and stateSince)."""
    query = _HOSTS + (" AND id = %s" if host_id is not None else "")
    cur = await conn.execute(query, [workspace_id, *([host_id] if host_id is not None else [])])
    hosts = {
        hid: (observed_at, status, tick) for hid, observed_at, status, tick in await cur.fetchall()
    }
    runs = await runs_in_force(conn, workspace_id, list(hosts), now)
    found: list[JobNow] = []
    newest: dict[int, Newest] = {}
    for (hid, _uuid), gpu_runs in sorted(runs.items()):
        if hid not in newest:
            observed_at, status, tick = hosts[hid]
            fresh = freshness(observed_at, status, now, stale_after_seconds)
            newest[hid] = newest_of_tick(tick) if fresh not in ("stale", "never") else {}
        for run in gpu_runs:
            state, holders, since, pairs = newest[hid].get(run.gpu_id, (None, (), None, ()))
            found.append(job_now(run, state, holders, since, pairs))
    return found


class JobNowOut(ReadModel):
    """A GPU's job in the hosts API (`gpus[].job`): the run in force now (the oldest,
    when a scheduler shares the GPU), how the GPU stands for it and since when.

    `publicId` names the job's page (/w/{slug}/jobs/{publicId}); `foreignUsers` are the
    other holders when `foreign` (null for roles that see no processes)."""

    job_id: str
    cluster: str
    public_id: str
    user: str
    account: str
    standing: Standing | None
    since: IsoTime | None
    foreign_users: list[str] | None


def job_out(now: JobNow, with_processes: bool) -> JobNowOut:
    run = now.run
    return JobNowOut(
        job_id=run.job_id,
        cluster=run.cluster,
        public_id=str(run.public_id),
        user=run.linux_user,
        account=run.account,
        standing=now.standing,
        since=now.since,
        foreign_users=list(now.foreign_users) if with_processes else None,
    )
