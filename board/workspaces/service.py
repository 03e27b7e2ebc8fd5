"""Workspaces, members and settings; every query starts from a workspace id."""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError
from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from board.auth import passwords, routing, tokens
from board.auth.deps import workspace_id_of
from board.auth.emails import mailable, plausible_email
from board.auth.models import ROLES, ApiToken, Membership, User, Workspace
from board.db.connection import report_connection
from board.errors import Conflict, Forbidden, NotFound, Unprocessable
from board.workspaces.sample_gap import change_sample_gap
from board.workspaces.schemas import (
    AddedMember,
    ApiTokenOut,
    Member,
    MembershipTokens,
    SampleGapValue,
    SettingsPatch,
    WorkspaceSettings,
)

_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
# No spaces or control characters (PostgreSQL text cannot even hold NUL).
# Live personal API tokens one person may hold in one workspace.
MAX_API_TOKENS = 20


async def create_workspace(session: AsyncSession, slug: str, name: str | None) -> Workspace:
    if not _SLUG.fullmatch(slug):  # match() lets "$" pass a trailing newline
        raise Unprocessable(
            "A workspace slug is 1-63 lowercase letters, digits or dashes, starting with a "
            "letter or digit."
        )
    if await workspace_id_of(session, slug) is not None:
        raise Conflict(f"Workspace {slug!r} already exists.")
    workspace = Workspace(slug=slug, name=name or slug)
    session.add(workspace)
    await session.flush()
    # The route is the slug's global uniqueness: of two creating it at once, one is a 409.
    try:
        await routing.session_add(
            session, routing.WORKSPACE_SLUG, routing.slug_key(slug), workspace.id
        )
    except Conflict:
        raise Conflict(f"Workspace {slug!r} already exists.") from None
    return workspace


async def get_workspace(session: AsyncSession, slug: str) -> Workspace:
    workspace_id = await workspace_id_of(session, slug)
    workspace = None if workspace_id is None else await session.get(Workspace, workspace_id)
    if workspace is None:
        raise NotFound(f"No workspace {slug!r}.")
    return workspace


@dataclass(frozen=True)
class NewMember:
    user: User
    workspace: str
    role: str
    api_token: str = field(repr=False)
    # The email already had an account (here or in another workspace): it only gained
    # this membership; its password and everything else about it are unchanged.
    existing_account: bool
    # The role the person had here before (None: they were not a member): an audit entry
    # says "role changed" rather than "added".
    previous_role: str | None = None

    def audited(self) -> tuple[str, str, dict[str, object]]:
        """(action, target, detail) of the audit entry; never the token."""
        if self.previous_role is None:
            return "member.added", self.user.email, {"role": self.role}
        detail: dict[str, object] = {"role": self.role, "previousRole": self.previous_role}
        return "member.role_changed", self.user.email, detail

    def shown(self) -> AddedMember:
        """As the API answers and the admin page shows it (the token, this once)."""
        return AddedMember(
            email=self.user.email,
            workspace=self.workspace,
            role=self.role,
            api_token=self.api_token,
            existing_account=self.existing_account,
        )


PasswordHasher = Callable[[str], Awaitable[str]]


async def _hash_in_thread(password: str) -> str:
    # Off the event loop; the web and API pass their process's PasswordGate instead.
    return await asyncio.to_thread(passwords.hash_password, password)


async def add_member(
    session: AsyncSession,
    workspace: Workspace,
    email: str,
    role: str,
    password: str | None,
    hash_password: PasswordHasher | None = None,
) -> NewMember:
    """Give the person the role here, and a new personal API token (the old ones end).

    A new account may get a first password. An existing account is never changed: an
    admin of one workspace must not set the password of someone who belongs to another
    (that was an account takeover across workspaces). Only the person changes it.
    """
    email = email.strip().lower()
    # Mail must reach the person it names: "a<b>@x" would be mailed to "b".
    if not (plausible_email(email) and mailable(email)):
        raise Unprocessable(f"{email[:320]!r} is not an email address.")
    if role not in ROLES:
        raise Unprocessable(f"Role must be one of {', '.join(ROLES)}.")
    if password is not None and not 8 <= len(password) <= 1024:
        raise Unprocessable("A password must be 8 to 1024 characters.")
    user = await session.scalar(select(User).where(User.email == email))
    existing = user is not None
    if user is None:
        hasher = hash_password or _hash_in_thread
        user = User(
            email=email, password_hash=await hasher(password) if password is not None else None
        )
        session.add(user)
        await session.flush()
    membership = await session.get(Membership, (workspace.id, user.id))
    previous_role = None if membership is None else membership.role
    if membership is None:
        session.add(Membership(workspace_id=workspace.id, user_id=user.id, role=role))
    else:
        if membership.role == "admin" and role != "admin":
            # A re-add with another role is a demotion: the last admin may not lose it.
            await _ensure_not_last_admin(session, workspace.id)
        membership.role = role
        # Re-adding hands out a new token: the ones issued before stop working.
        await revoke_member_tokens(session, workspace.id, user.id)
    await session.flush()
    token = await issue_api_token(session, workspace.id, user.id)
    return NewMember(
        user=user,
        workspace=workspace.slug,
        role=role,
        api_token=token.secret,
        existing_account=existing,
        previous_role=previous_role,
    )


async def find_member(session: AsyncSession, workspace_id: int, email: str) -> Membership:
    if not plausible_email(email.strip().lower()):
        raise NotFound("No such member in this workspace.")
    membership = await session.scalar(
        select(Membership)
        .join(User, User.id == Membership.user_id)
        .where(Membership.workspace_id == workspace_id, User.email == email.strip().lower())
    )
    if membership is None:
        raise NotFound("No such member in this workspace.")
    return membership


async def _ensure_not_last_admin(session: AsyncSession, workspace_id: int) -> None:
    # FOR UPDATE: two admins stepping down at once would each count the other; locked,
    # the second waits for the first and re-reads its row, no longer an admin's.
    admins = (
        await session.scalars(
            select(Membership.user_id)
            .where(Membership.workspace_id == workspace_id, Membership.role == "admin")
            .with_for_update()
        )
    ).all()
    if len(admins) <= 1:
        raise Conflict("This is the workspace's only admin; make someone else admin first.")


async def remove_member(session: AsyncSession, workspace_id: int, email: str) -> int:
    """End the membership and its API tokens; the person's user id (to end their sessions).

    The last admin cannot be removed: nobody could manage the workspace after.
    """
    membership = await find_member(session, workspace_id, email)
    if membership.role == "admin":
        await _ensure_not_last_admin(session, workspace_id)
    user_id = membership.user_id
    ended = await session.scalars(
        delete(ApiToken)
        .where(ApiToken.workspace_id == workspace_id, ApiToken.user_id == user_id)
        .returning(ApiToken.token_hash)
    )
    await routing.session_drop(session, routing.API_TOKEN, list(ended), workspace_id)
    await session.delete(membership)
    await session.flush()
    return user_id


async def has_memberships(session: AsyncSession, user_id: int) -> bool:
    found = await session.scalar(select(Membership.user_id).where(Membership.user_id == user_id))
    return found is not None


async def ensure_may_end_all_sessions(
    session: AsyncSession, admin_user_id: int, user_id: int
) -> None:
    """An admin may sign a person out of every browser only in this case (else 403).

    Sessions belong to the person, not to a workspace: ending them all would reach into
    every workspace the person belongs to. So an admin may do it only when they are an
    admin of each of those workspaces; otherwise the person does it (their account page)
    or the operator does (`gua-board sign-out`).
    """
    admin = Membership.__table__.alias("admin")
    beyond = await session.scalar(
        select(func.count())
        .select_from(Membership)
        .where(
            Membership.user_id == user_id,
            ~select(admin.c.user_id)
            .where(
                admin.c.workspace_id == Membership.workspace_id,
                admin.c.user_id == admin_user_id,
                admin.c.role == "admin",
            )
            .exists(),
        )
    )
    if beyond:
        raise Forbidden(
            "This person also belongs to a workspace you do not administer, so you cannot "
            "end all their sessions; they can (their account page), or the board's operator."
        )


async def revoke_member_tokens(session: AsyncSession, workspace_id: int, user_id: int) -> None:
    revoked = await session.scalars(
        update(ApiToken)
        .where(
            ApiToken.workspace_id == workspace_id,
            ApiToken.user_id == user_id,
            ApiToken.revoked_at.is_(None),
        )
        .values(revoked_at=func.now())
        .returning(ApiToken.token_hash)
    )
    await routing.session_drop(session, routing.API_TOKEN, list(revoked), workspace_id)


async def issue_api_token(
    session: AsyncSession,
    workspace_id: int,
    user_id: int,
    *,
    name: str | None = None,
    expires_at: datetime | None = None,
) -> tokens.IssuedToken:
    """A new personal API token for the membership; the secret is shown once."""
    # The membership row is locked until the request commits, so concurrent issues for
    # one person count one after another: unlocked, 30 at once each counted the same
    # live tokens and stored up to 38 of the 20 allowed. (READ COMMITTED: the count,
    # run after the lock is granted, sees the tokens the previous holder committed.)
    await session.execute(
        select(Membership.user_id)
        .where(Membership.workspace_id == workspace_id, Membership.user_id == user_id)
        .with_for_update()
    )
    live = await session.scalar(
        select(func.count())
        .select_from(ApiToken)
        .where(
            ApiToken.workspace_id == workspace_id,
            ApiToken.user_id == user_id,
            ApiToken.revoked_at.is_(None),
            or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > func.now()),
        )
    )
    if live is not None and live >= MAX_API_TOKENS:
        raise Conflict(
            f"You already have {MAX_API_TOKENS} API tokens in this workspace; revoke one first."
        )
    issued = tokens.issue(tokens.PAT)
    session.add(
        ApiToken(
            workspace_id=workspace_id,
            user_id=user_id,
            token_hash=issued.digest,
            token_prefix=issued.prefix,
            name=name,
            expires_at=expires_at,
        )
    )
    await session.flush()
    await routing.session_add(session, routing.API_TOKEN, issued.digest, workspace_id)
    return issued


async def list_api_tokens(
    session: AsyncSession, workspace_id: int, user_id: int
) -> list[ApiTokenOut]:
    """The person's tokens in the workspace, newest first (prefixes only; never a secret)."""
    found = await session.scalars(
        select(ApiToken)
        .where(ApiToken.workspace_id == workspace_id, ApiToken.user_id == user_id)
        .order_by(ApiToken.created_at.desc(), ApiToken.id.desc())
    )
    return [ApiTokenOut.model_validate(t) for t in found]


async def api_tokens_by_workspace(session: AsyncSession, user_id: int) -> list[MembershipTokens]:
    """Every workspace the person belongs to (by name), with their tokens there."""
    memberships = await session.execute(
        select(Workspace.id, Workspace.slug, Workspace.name, Membership.role)
        .join(Membership, Membership.workspace_id == Workspace.id)
        .where(Membership.user_id == user_id)
        .order_by(Workspace.name, Workspace.slug)
    )
    tokens = await session.scalars(
        select(ApiToken)
        .where(ApiToken.user_id == user_id)
        .order_by(ApiToken.created_at.desc(), ApiToken.id.desc())
    )
    by_workspace: dict[int, list[ApiTokenOut]] = defaultdict(list)
    for token in tokens:
        by_workspace[token.workspace_id].append(ApiTokenOut.model_validate(token))
    return [
        MembershipTokens(slug=slug, name=name, role=role, tokens=by_workspace[workspace_id])
        for workspace_id, slug, name, role in memberships.all()
    ]


async def revoke_api_token(
    session: AsyncSession, workspace_id: int, user_id: int, token_prefix: str
) -> None:
    """Revoke one of the person's own tokens; anyone else's is not found."""
    token = await session.scalar(
        select(ApiToken).where(
            ApiToken.workspace_id == workspace_id,
            ApiToken.user_id == user_id,
            ApiToken.token_prefix == token_prefix,
        )
    )
    if token is None:
        raise NotFound("No such API token of yours.")
    if token.revoked_at is None:
        token.revoked_at = datetime.now(UTC)
    await session.flush()
    await routing.session_drop(session, routing.API_TOKEN, [token.token_hash], workspace_id)


async def set_password(session: AsyncSession, user_id: int, password_hash: str) -> None:
    user = await session.get(User, user_id)
    if user is None:
        raise NotFound("No such person.")
    user.password_hash = password_hash
    await session.flush()


async def list_members(session: AsyncSession, workspace_id: int) -> list[Member]:
    rows = await session.execute(
        select(User.email, Membership.role)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.workspace_id == workspace_id)
        .order_by(User.email)
    )
    return [Member(email=email, role=role) for email, role in rows.all()]


async def find_user(session: AsyncSession, email: str) -> User | None:
    """The account of a plausible email (already lower-cased), else none."""
    if not plausible_email(email):
        return None
    return await session.scalar(select(User).where(User.email == email))


def settings_of(workspace: Workspace) -> WorkspaceSettings:
    history = [
        SampleGapValue(seconds=seconds, from_=start)
        for start, seconds in zip(
            workspace.sample_gap_from, workspace.sample_gap_seconds, strict=True
        )
    ]
    return WorkspaceSettings.model_validate(
        {
            **{name: getattr(workspace, name) for name in _PLAIN_SETTINGS},
            "max_sample_gap_history": history,
        }
    )


_PLAIN_SETTINGS = [
    name for name in WorkspaceSettings.model_fields if name != "max_sample_gap_history"
]


def parse_settings(changes: dict[str, object]) -> SettingsPatch:
    """Settings from a form (the API's body is validated by FastAPI with the same model)."""
    try:
        return SettingsPatch.model_validate(changes)
    except ValidationError as exc:
        raise Unprocessable(exc.errors()[0]["msg"]) from None


def _check_job_idle(workspace: Workspace, patch: SettingsPatch) -> None:
    """The escalation comes after the notice, with the values the row will have."""
    notice = patch.job_idle_notice_minutes or workspace.job_idle_notice_minutes
    escalate = patch.job_idle_escalate_minutes or workspace.job_idle_escalate_minutes
    if escalate <= notice:
        raise Unprocessable(
            f"jobIdleEscalateMinutes ({escalate}) must be more than "
            f"jobIdleNoticeMinutes ({notice}): the account is told after the user."
        )


async def update_settings(
    session: AsyncSession, workspace: Workspace, patch: SettingsPatch, now: datetime | None = None
) -> dict[str, object]:
    """Applies a patch validated whole beforehand, so nothing is ever half-applied.

    A new maxSampleGap is dated and re-judges what it covers (board.workspaces.sample_gap);
    it goes first, as it locks the workspace's hosts before its row. Returns the audit
    entry's detail: each setting sent, and `previous_<name>` for each one that changed
    (a shortened retention says from what to what).
    """
    detail: dict[str, object] = {}
    if patch.max_sample_gap_seconds is not None:
        conn = await report_connection(session)
        previous = await change_sample_gap(
            conn,
            workspace.id,
            patch.max_sample_gap_seconds,
            patch.max_sample_gap_from,
            now if now is not None else datetime.now(UTC),
        )
        sent = patch.audited()
        detail["max_sample_gap_seconds"] = patch.max_sample_gap_seconds
        if "max_sample_gap_from" in sent:
            detail["max_sample_gap_from"] = sent["max_sample_gap_from"]
        if previous != patch.max_sample_gap_seconds:
            detail["previous_max_sample_gap_seconds"] = previous
    # The row as it stands, locked: two admins' changes at once each record the value
    # the other left as "previous", not the one read when the request began.
    await session.refresh(workspace, with_for_update=True)
    _check_job_idle(workspace, patch)
    for name, value in patch.changes().items():
        previous = getattr(workspace, name)
        setattr(workspace, name, value)
        detail[name] = value
        if previous != value:
            detail[f"previous_{name}"] = previous
    await session.flush()
    await session.refresh(workspace)
    return detail
