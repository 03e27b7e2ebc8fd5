"""Sign-ins with an OpenID provider: the pending login (single-use, bound to the
browser), and the account the provider's verified email belongs to.

The pages (board/web/sso_routes.py) hold the cookies and the web session; this module
holds the rules. Starts are anonymous, so the pending logins are bounded per client and
in all (PendingLimits).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select, true
from sqlalchemy.ext.asyncio import AsyncSession

from board.audit.service import record_event
from board.auth import tokens
from board.auth.deps import workspace_id_of
from board.auth.emails import plausible_email
from board.auth.models import Membership, User, Workspace
from board.settings import OidcProvider
from board.sso import oidc
from board.sso.models import SsoLogin
from board.sso.oidc import SsoFailed
from board.workspaces.service import find_user

# Time from "Sign in with …" to coming back from the provider.
PENDING_SECONDS = 600
MAX_STATE_CHARS = 200


@dataclass(frozen=True)
class Begun:
    url: str  # the provider's authorization URL
    browser_secret: str  # for a cookie of this browser only


@dataclass(frozen=True)
class PendingLimits:
    """Sign-ins started and not finished: at most per_client of one client, in_all in all."""

    per_client: int
    in_all: int


class TooManyStarts(Exception):
    """No room for another pending sign-in; the sentence is shown, Retry-After is retry_after."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def client_key(address: str) -> bytes:
    """The digest of the client an address belongs to: an IPv6 address's /64 (one host
    is given a whole /64, and could start from each of its addresses), else the address."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        client = address
    else:
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            client = str(ip.ipv4_mapped)
        elif isinstance(ip, ipaddress.IPv6Address):
            client = str(ipaddress.IPv6Network((ip.packed[:8] + bytes(8), 64)))
        else:
            client = str(ip)
    return hashlib.sha256(f"sso-client\x00{client}".encode()).digest()


async def begin(
    db: AsyncSession,
    provider: OidcProvider,
    redirect_uri: str,
    next_path: str,
    client: bytes,
    limits: PendingLimits,
) -> Begun:
    """A new pending login, kept (hashed) until the callback or PENDING_SECONDS, when the
    client and the board have room for one (else TooManyStarts)."""
    # The provider first (its discovery document, cached): no database connection or lock
    # is held while a slow provider answers.
    started = await oidc.start(provider, redirect_uri)
    now = datetime.now(UTC)
    # Abandoned logins go as new ones start: the table stays small without a schedule.
    await db.execute(delete(SsoLogin).where(SsoLogin.expires_at <= now))
    await _make_room(db, client, limits, now)
    browser_secret = secrets.token_urlsafe(32)
    db.add(
        SsoLogin(
            state_hash=tokens.digest(started.state),
            browser_hash=tokens.digest(browser_secret),
            client_hash=client,
            provider=provider.name,
            nonce=started.nonce,
            code_verifier=started.code_verifier,
            next_path=next_path,
            expires_at=now + timedelta(seconds=PENDING_SECONDS),
        )
    )
    await db.flush()
    return Begun(url=started.url, browser_secret=browser_secret)


async def _make_room(db: AsyncSession, client: bytes, limits: PendingLimits, now: datetime) -> None:
    """Refuse a start past either bound; the answer says when the oldest pending one ends.

    One client's starts take turns (a lock on its key until the request commits), so
    concurrent ones, in any board process, cannot all count below its bound. The bound in
    all guards the table's size, not an exact count: starts of different clients at the
    same moment may pass it by as many as run at once."""
    lock_id = int.from_bytes(client[:8], "big", signed=True)
    await db.execute(select(func.pg_advisory_xact_lock(lock_id)))
    live = SsoLogin.expires_at > now
    bounds = (
        (SsoLogin.client_hash == client, limits.per_client, _TOO_MANY_HERE),
        (true(), limits.in_all, _TOO_MANY_IN_ALL),
    )
    for which, bound, message in bounds:
        count, oldest = (
            await db.execute(select(func.count(), func.min(SsoLogin.expires_at)).where(live, which))
        ).one()
        if count >= bound:
            retry = max(1, math.ceil((oldest - now).total_seconds())) if oldest else 1
            raise TooManyStarts(message.format(minutes=max(1, round(retry / 60))), retry)


_TOO_MANY_HERE = (
    "Too many sign-ins started from your address and not finished. Finish one, or try "
    "again in {minutes} min."
)
_TOO_MANY_IN_ALL = "The board is busy with other sign-ins. Try again in {minutes} min."


async def take_pending(
    db: AsyncSession, provider: OidcProvider, state: str, browser_secret: str | None
) -> SsoLogin:
    """The pending login of this state, removed whatever happens next (single use)."""
    if not state or len(state) > MAX_STATE_CHARS:
        raise SsoFailed("This sign-in link is not valid. Start again.")
    row = (
        await db.execute(
            delete(SsoLogin).where(SsoLogin.state_hash == tokens.digest(state)).returning(SsoLogin)
        )
    ).scalar_one_or_none()
    if row is None or row.expires_at <= datetime.now(UTC) or row.provider != provider.name:
        raise SsoFailed("This sign-in has expired or was already used. Start again.")
    if browser_secret is None or not hmac.compare_digest(
        tokens.digest(browser_secret), row.browser_hash
    ):
        raise SsoFailed("This sign-in was started in another browser. Start again from this one.")
    return row


async def account_for(
    db: AsyncSession, provider: OidcProvider, identity: oidc.Identity, address: str
) -> User:
    """The person the provider vouches for: an account with that email, or a new one when
    a workspace to join is configured; either only for an email domain the provider
    speaks for (allowed_domains), or for any existing account with allow_any_domain.
    `address` (the browser's) goes into the audit entry of a person who joins."""
    email = identity.email
    if email is None or not plausible_email(email):
        raise SsoFailed(f"{provider.display_name} did not share an email address.")
    if identity.email_verified is False:
        raise SsoFailed(f"{provider.display_name} says {email} is not verified.")
    # Accounts are found by email alone (no issuer and subject is kept), so the domain
    # is the whole of what ties a provider to the accounts it may sign in.
    domain = email.rsplit("@", 1)[1]
    listed = domain in provider.allowed_domains
    if not listed and not provider.allow_any_domain:
        raise SsoFailed(
            f"{provider.display_name} does not sign in accounts of {domain} on this board. "
            "Sign in another way, or ask an admin."
        )
    user = await find_user(db, email)
    if user is not None:
        return user
    if provider.join_workspace is None or not listed:
        raise SsoFailed(f"There is no account for {email} on this board. Ask an admin to add you.")
    workspace = await _workspace(db, provider.join_workspace)
    user = User(email=email, password_hash=None)
    db.add(user)
    await db.flush()
    db.add(Membership(workspace_id=workspace.id, user_id=user.id, role=provider.join_role))
    record_event(
        db,
        workspace.id,
        "member.joined",
        user_id=user.id,
        email=email,
        target=email,
        detail={"role": provider.join_role, "provider": provider.name},
        address=address,
    )
    await db.flush()
    return user


async def _workspace(db: AsyncSession, slug: str) -> Workspace:
    workspace_id = await workspace_id_of(db, slug)
    workspace = None if workspace_id is None else await db.get(Workspace, workspace_id)
    if workspace is None:
        raise SsoFailed("Single sign-on is misconfigured on this board (no workspace to join).")
    return workspace
