"""REST for job records (docs/jobs.md, "Job records"): a node posts its own host's jobs
with its agent token, a bridge on the scheduler's controller posts every node's with a
scheduler's API token, and readers list them."""

from __future__ import annotations

from typing import Annotated, Protocol

from fastapi import APIRouter, Depends, Query
from starlette.requests import HTTPConnection

from board.auth.deps import AgentTokenHeader, JobReaderDep, SchedulerDep
from board.db.deps import SessionDep
from board.errors import NO_NUL
from board.jobs import intake, service
from board.jobs.queries import DEFAULT_LIMIT, MAX_LIMIT, JobFilter, list_jobs
from board.jobs.schemas import (
    AgentJobsIn,
    BridgeJobsAccepted,
    BridgeJobsIn,
    JobList,
    JobsAccepted,
)
from board.reportkit import params

agent_router = APIRouter(prefix="/agent/v1", tags=["agent"])
router = APIRouter(prefix="/api/v1/workspaces/{slug}", tags=["jobs"])
Text = Annotated[str | None, Query(max_length=200, pattern=NO_NUL)]


class _AgentKey(Protocol):
    @property
    def workspace_id(self) -> int: ...

    @property
    def host_id(self) -> int: ...


class _AgentAccess(Protocol):
    async def authenticate(
        self, authorization: str | None, *, fresh: bool = False
    ) -> _AgentKey: ...


async def agent_host(
    connection: HTTPConnection, authorization: AgentTokenHeader = None
) -> _AgentKey:
    """The host whose agent token this is, looked up now (never from a cache): a revoked
    host's token is refused (401). The one agent-access seam is the runtime's `access`
    (board/ingest/access.py), read by attribute as every agent route reads it."""
    access: _AgentAccess = connection.app.state.runtime.access
    return await access.authenticate(authorization, fresh=True)


AgentHostDep = Annotated[_AgentKey, Depends(agent_host)]


@agent_router.post(
    "/jobs", status_code=202, summary="Record this host's scheduler jobs (prolog, epilog, agent)"
)
async def post_node_jobs(
    body: AgentJobsIn, host: AgentHostDep, session: SessionDep
) -> JobsAccepted:
    """Each record names this host (the token's, never one the body names) and the devices
    (Slurm's GRES IDX) the job holds here; it replaces what was known of the run here."""
    records = intake.node_records(body.jobs, host.host_id)
    await service.record_jobs(session, host.workspace_id, records, from_node=True)
    return JobsAccepted(accepted=len(records))


@router.post("/jobs", status_code=202, summary="Record a scheduler's jobs (a controller's bridge)")
async def post_jobs(
    body: BridgeJobsIn, ctx: SchedulerDep, session: SessionDep
) -> BridgeJobsAccepted:
    """Hosts are matched by the short form of their hostname or display name, any case;
    an allocation on a host that matches none (or several) is left out and named in
    `unmatchedHosts`, the rest of its record kept."""
    records, unmatched = await intake.bridge_records(session, ctx.workspace_id, body.jobs)
    await service.record_jobs(session, ctx.workspace_id, records)
    return BridgeJobsAccepted(accepted=len(records), unmatched_hosts=unmatched)


@router.get("/jobs", summary="List the scheduler's job runs that overlap a window")
async def get_jobs(
    ctx: JobReaderDep,
    session: SessionDep,
    from_: Annotated[str, Query(alias=params.FROM, min_length=1, description=params.BOUND_HELP)],
    to: Annotated[str, Query(alias=params.TO, min_length=1, description=params.BOUND_HELP)],
    tz: Text = None,
    user: Text = None,
    account: Text = None,
    state: Text = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
) -> JobList:
    """Runs overlapping [from, to), oldest start first; `truncated` when more than
    `limit` (at most 5,000) do."""
    window = params.parse_window(from_, to, tz)
    wanted = JobFilter(window.start, window.end, user, account, state, limit)
    return await list_jobs(session, ctx.workspace_id, wanted)
