"""Sign in with an OpenID provider: start (to the provider) and callback (back here).

The protocol and the rules are in board/sso; here are the cookies: a short-lived one
binding the pending sign-in to this browser, and on success the same server-side web
session as a password sign-in. Every failure is the sign-in page with a sentence.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from board.audit.deps import ClientAddressDep
from board.audit.service import record_for_person
from board.auth import web_sessions
from board.db.deps import SessionDep
from board.errors import NotFound
from board.runtime import RuntimeDep
from board.settings import OidcProvider, Settings
from board.sso import oidc, service
from board.sso.oidc import SsoFailed
from board.web.deps import WebSessionDep
from board.web.render import PageRoute, finish, redirect
from board.web.sessions import WebSession, cookie_secure
from board.web.signin_page import safe_next, signin_page
from board.workspaces.service import find_user

log = logging.getLogger(__name__)

router = APIRouter(prefix="/signin/sso", route_class=PageRoute, include_in_schema=False)

BROWSER_COOKIE = "gua_sso"
_COOKIE_PATH = "/signin/sso"
Param = Annotated[str, Query(max_length=2000)]


def _provider(settings: Settings, name: str) -> OidcProvider:
    for provider in settings.sso_providers:
        if provider.name == name:
            return provider
    raise NotFound("No such sign-in provider.")


def _redirect_uri(request: Request, settings: Settings, name: str) -> str:
    base = (settings.public_url or str(request.base_url)).rstrip("/")
    return f"{base}{_COOKIE_PATH}/{name}/callback"


def _failed(
    request: Request, settings: Settings, exc: SsoFailed, next: str = "/", status: int = 400
) -> Response:
    response = signin_page(request, settings, next=next, error=str(exc), status_code=status)
    response.delete_cookie(BROWSER_COOKIE, path=_COOKIE_PATH)
    return response


def _too_many(
    request: Request, settings: Settings, exc: service.TooManyStarts, next: str
) -> Response:
    """429 with Retry-After; the browser's cookie stays (its earlier start may finish)."""
    response: Response
    if "application/json" in (request.headers.get("accept") or ""):
        response = finish(request, JSONResponse({"detail": str(exc)}, 429))
    else:
        response = signin_page(request, settings, next=next, error=str(exc), status_code=429)
    response.headers["Retry-After"] = str(exc.retry_after)
    return response


@router.get("/{name}")
async def start(
    request: Request,
    name: str,
    db: SessionDep,
    runtime: RuntimeDep,
    address: ClientAddressDep,
    _web: WebSessionDep,
    next: Param = "/",
) -> Response:
    """To the provider, with a fresh state, nonce and PKCE challenge."""
    settings = runtime.settings
    provider = _provider(settings, name)
    limits = service.PendingLimits(settings.sso_max_pending_per_address, settings.sso_max_pending)
    try:
        begun = await service.begin(
            db,
            provider,
            _redirect_uri(request, settings, name),
            safe_next(next),
            service.client_key(address),
            limits,
        )
    except service.TooManyStarts as exc:
        return _too_many(request, settings, exc, next)
    except SsoFailed as exc:
        return _failed(request, settings, exc, next, status=502)
    response = redirect(request, begun.url)
    response.set_cookie(
        BROWSER_COOKIE,
        begun.browser_secret,
        max_age=service.PENDING_SECONDS,
        path=_COOKIE_PATH,
        httponly=True,
        # lax: the provider's redirect back is a top-level GET, which carries it.
        samesite="lax",
        secure=cookie_secure(request, settings),
    )
    return response


@router.get("/{name}/callback")
async def callback(
    request: Request,
    name: str,
    db: SessionDep,
    runtime: RuntimeDep,
    address: ClientAddressDep,
    web: WebSessionDep,
    state: Param = "",
    code: Param = "",
    error: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    settings = runtime.settings
    provider = _provider(settings, name)
    try:
        pending = await service.take_pending(
            db, provider, state, request.cookies.get(BROWSER_COOKIE)
        )
    except SsoFailed as exc:
        return _failed(request, settings, exc)
    user_id, email = None, ""
    try:
        if error:
            raise SsoFailed(f"{provider.display_name} did not sign you in ({error[:60]}).")
        if not code:
            raise SsoFailed(f"{provider.display_name} sent no authorization code. Start again.")
        identity = await oidc.finish(
            provider,
            _redirect_uri(request, settings, name),
            code,
            pending.code_verifier,
            pending.nonce,
        )
        email = identity.email or ""
        user = await service.account_for(db, provider, identity, address)
        user_id = user.id
    except SsoFailed as exc:
        if email:
            known = await find_user(db, email)
            await record_for_person(
                db,
                "signin.failed",
                user_id=None if known is None else known.id,
                email=email,
                address=address,
                detail={"method": "sso", "provider": provider.name, "reason": str(exc)},
            )
        log.info("single sign-on with %s refused: %s", provider.name, exc)
        return _failed(request, settings, exc, pending.next_path)
    if web.secret is not None:  # signing in again: the browser's old session ends here
        await web_sessions.end(db, web.secret)
    secret = await web_sessions.start(db, user_id, settings.session_max_age_seconds)
    await record_for_person(
        db,
        "signin.succeeded",
        user_id=user_id,
        email=email,
        address=address,
        detail={"method": "sso", "provider": provider.name},
    )
    # A fresh CSRF token with the new session (no session fixation), written by redirect().
    request.state.web_session = WebSession.signed_in(secret)
    request.state.write_session = True
    response = redirect(request, pending.next_path)
    response.delete_cookie(BROWSER_COOKIE, path=_COOKIE_PATH)
    return response
