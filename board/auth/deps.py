"""Who is calling, in which workspace, with which role: resolved before any handler runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.openapi.models import HTTPBearer as HTTPBearerModel
from fastapi.security.base import SecurityBase
from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection

from board.auth import routing, tokens
from board.auth.models import READER_ROLES, ROLES, ApiToken, Membership, User, Workspace
from board.auth.passwords import PasswordGate
from board.db.deps import SessionDep
from board.errors import REFUSALS, Forbidden, NotFound, Unauthorized, refuses
from board.settings import SettingsDep


def client_address(connection: HTTPConnection) -> str:
    """The client's address as the server resolved it.

    uvicorn rewrites it from X-Forwarded-For only when the peer is a trusted proxy
    (its forwarded_allow_ips setting, as for every other use of the address in the
    board), so a client cannot write a made-up address into the log.
    """
    return connection.client.host if connection.client else "unknown"


ClientAddressDep = Annotated[str, Depends(client_address)]


@dataclass(frozen=True)
class WorkspaceContext:
    workspace: Workspace
    user_id: int
    email: str
    role: str
    # Where the request came from: every audit entry written with this context says so
    # (board.audit.service.record reads it), so no action can forget to.
    client_address: str

    @property
    def workspace_id(self) -> int:
        return self.workspace.id

    def require(self, *roles: str) -> None:
        if self.role not in roles:
            raise Forbidden(f"Your role ({self.role}) may not do this.")

    @property
    def sees_processes(self) -> bool:
        return self.role in ("admin", "member")


class BearerHeader(SecurityBase):
    """The Authorization header as sent, declared in the OpenAPI as an HTTP bearer scheme
    (so /docs, generated clients and API tools know to send one).

    FastAPI's HTTPBearer would refuse a missing or malformed header itself; the board's
    token checks read the header and say why in their own 401 sentence."""

    def __init__(self, name: str, bearer_format: str, description: str) -> None:
        self.model = HTTPBearerModel(bearerFormat=bearer_format, description=description)
        self.scheme_name = name
        REFUSALS[self] = (401,)  # whoever reads the header refuses a bad token with 401

    async def __call__(self, connection: HTTPConnection) -> str | None:
        return connection.headers.get("authorization")


# A person's personal API token (gua_pat_…), scoped to one workspace.
API_TOKEN = BearerHeader(
    "apiToken",
    "gua_pat",
    "A personal API token (`gua_pat_…`), sent as `Authorization: Bearer gua_pat_…`. "
    "`gua-board create-user` prints the first; `POST /api/v1/me/api-tokens` issues more.",
)
ApiTokenHeader = Annotated[str | None, Depends(API_TOKEN)]

# A host's agent token (gua_agent_…), which enrollment gave it: declared here, below every
# domain, so any domain with an agent route (ingest, archives, jobs) names the one scheme;
# the token is checked by the agent-access seam (board/ingest/access.py).
AGENT_TOKEN = BearerHeader(
    "agentToken",
    "gua_agent",
    "A host's agent token (`gua_agent_…`), sent as `Authorization: Bearer gua_agent_…`; "
    "`POST /agent/v1/enrollments/claim` trades an enrollment token for it.",
)
AgentTokenHeader = Annotated[str | None, Depends(AGENT_TOKEN)]


@refuses(401)
async def token_context(
    session: SessionDep,
    address: ClientAddressDep,
    authorization: ApiTokenHeader = None,
) -> WorkspaceContext:
    """The membership a personal API token belongs to (a token is scoped to one workspace)."""
    secret = tokens.bearer(authorization)
    if secret is None or not secret.startswith(tokens.PAT) or len(secret) > 200:
        raise Unauthorized("A personal API token is required: Authorization: Bearer gua_pat_...")
    digest = tokens.digest(secret)
    # Routed: the token's workspace first (board.auth.routing), then the token there.
    workspace_id = await routing.session_workspace_of(session, routing.API_TOKEN, digest)
    if workspace_id is None:
        raise Unauthorized("This API token is not valid.")
    row = (
        await session.execute(
            select(Workspace, User.id, User.email, Membership.role)
            .select_from(ApiToken)
            .join(Workspace, Workspace.id == ApiToken.workspace_id)
            .join(
                Membership,
                (Membership.workspace_id == ApiToken.workspace_id)
                & (Membership.user_id == ApiToken.user_id),
            )
            .join(User, User.id == ApiToken.user_id)
            .where(
                ApiToken.workspace_id == workspace_id,
                ApiToken.token_hash == digest,
                ApiToken.revoked_at.is_(None),
                or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > func.now()),
            )
        )
    ).one_or_none()
    if row is None:
        raise Unauthorized("This API token is not valid.")
    workspace, user_id, email, role = row
    return WorkspaceContext(
        workspace=workspace, user_id=user_id, email=email, role=role, client_address=address
    )


TokenDep = Annotated[WorkspaceContext, Depends(token_context)]


@refuses(404)
async def workspace_context(ctx: TokenDep, slug: Annotated[str, Path()]) -> WorkspaceContext:
    """A personal API token, valid for the workspace in the URL; any other workspace is 404."""
    if ctx.workspace.slug != slug:
        raise NotFound("No such workspace.")
    return ctx


WorkspaceDep = Annotated[WorkspaceContext, Depends(workspace_context)]


def _with_role(*roles: str) -> Callable[[WorkspaceContext], Awaitable[WorkspaceContext]]:
    async def check(ctx: WorkspaceDep) -> WorkspaceContext:
        ctx.require(*roles)
        return ctx

    return refuses(403)(check) if set(roles) != set(ROLES) else check


# Roles in the signature (board-api.md's role table): reading a route's parameters tells
# who may call it. Each is a WorkspaceDep that also answers 403 to any other role.
AdminDep = Annotated[WorkspaceContext, Depends(_with_role("admin"))]
# admin and member: the fleet in detail, processes, live graphs.
MemberDep = Annotated[WorkspaceContext, Depends(_with_role("admin", "member"))]
# admin, member and finance: reports and the host inventory (not the scheduler role).
ReaderDep = Annotated[WorkspaceContext, Depends(_with_role(*READER_ROLES))]
# admin and scheduler: posting a scheduler's job records (board.jobs).
SchedulerDep = Annotated[WorkspaceContext, Depends(_with_role("admin", "scheduler"))]
# the jobs list: every role (the readers, and the scheduler that posted them).
JobReaderDep = Annotated[WorkspaceContext, Depends(_with_role(*READER_ROLES, "scheduler"))]


async def workspace_id_of(session: AsyncSession, slug: str) -> int | None:
    """The workspace a slug names, through its route (board.auth.routing); None if none."""
    return await routing.session_workspace_of(
        session, routing.WORKSPACE_SLUG, routing.slug_key(slug)
    )


async def member_context(
    session: AsyncSession, slug: str, user_id: int, address: str
) -> WorkspaceContext:
    """A signed-in person (web session) in the workspace of the URL, calling from
    `address`; not a member is 404."""
    workspace_id = await workspace_id_of(session, slug)
    if workspace_id is None:
        raise NotFound("No such workspace.")
    row = (
        await session.execute(
            select(Workspace, User.email, Membership.role)
            .select_from(Membership)
            .join(Workspace, Workspace.id == Membership.workspace_id)
            .join(User, User.id == Membership.user_id)
            .where(Membership.workspace_id == workspace_id, Membership.user_id == user_id)
        )
    ).one_or_none()
    if row is None:
        raise NotFound("No such workspace.")
    workspace, email, role = row
    return WorkspaceContext(
        workspace=workspace, user_id=user_id, email=email, role=role, client_address=address
    )


async def memberships_of(session: AsyncSession, user_id: int) -> list[tuple[str, str, str]]:
    """(slug, name, role) of every workspace the person belongs to, by name."""
    rows = await session.execute(
        select(Workspace.slug, Workspace.name, Membership.role)
        .join(Membership, Membership.workspace_id == Workspace.id)
        .where(Membership.user_id == user_id)
        .order_by(Workspace.name, Workspace.slug)
    )
    return [(slug, name, role) for slug, name, role in rows.all()]


async def password_gate(request: Request, settings: SettingsDep) -> PasswordGate:
    """This process's bound on concurrent argon2 work (board.auth.passwords)."""
    gate = getattr(request.app.state, "password_gate", None)
    if not isinstance(gate, PasswordGate):
        gate = PasswordGate(settings.password_concurrency, settings.password_queue)
        request.app.state.password_gate = gate
    return gate


PasswordGateDep = Annotated[PasswordGate, Depends(password_gate)]
