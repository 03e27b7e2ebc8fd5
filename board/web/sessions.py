"""The session cookie: the visitor's CSRF token and, once signed in, a session secret.

The cookie is signed (itsdangerous, keyed by the board's secret key, with a max age) so
any worker can read it, but it proves nothing alone: a signed-in session is valid only
while its row exists in PostgreSQL (`board.auth.web_sessions`), so signing out, a
password change or an admin's "sign out everywhere" ends it in every process at once.
Every visitor gets a cookie, signed in or not, so the sign-in form has a CSRF token too;
signing in issues a fresh one (no session fixation).
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from board.settings import Settings

COOKIE = "gua_session"
CSRF_FIELD = "csrf_token"
_SALT = "gua-board.web-session.v2"


@dataclass(frozen=True)
class WebSession:
    csrf: str
    secret: str | None = None  # the server-side session's secret; None: not signed in

    @classmethod
    def anonymous(cls) -> WebSession:
        return cls(csrf=secrets.token_urlsafe(32))

    @classmethod
    def signed_in(cls, secret: str) -> WebSession:
        return cls(csrf=secrets.token_urlsafe(32), secret=secret)

    def csrf_matches(self, submitted: str | None) -> bool:
        return bool(submitted) and hmac.compare_digest(self.csrf, str(submitted))


def _serializer(settings: Settings) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(settings.resolved_secret_key(), salt=_SALT)


def read_session(request: Request, settings: Settings) -> WebSession | None:
    """The request's session, or None when it has none, a forged one, or an expired one."""
    raw = request.cookies.get(COOKIE)
    if not raw or len(raw) > 4096:
        return None
    try:
        data = _serializer(settings).loads(raw, max_age=settings.session_max_age_seconds)
    except BadSignature:  # also SignatureExpired
        return None
    if not isinstance(data, dict) or not isinstance(data.get("c"), str):
        return None
    secret = data.get("s")
    return WebSession(csrf=data["c"], secret=secret if isinstance(secret, str) else None)


def cookie_secure(request: Request, settings: Settings) -> bool:
    """The setting when set; else https as the client saw it, or an https public URL.

    Behind a TLS-terminating proxy the request's scheme is https only when the proxy is
    trusted (uvicorn's FORWARDED_ALLOW_IPS) and sends X-Forwarded-Proto.
    """
    if settings.cookie_secure is not None:
        return settings.cookie_secure
    public = (settings.public_url or "").lower()
    return request.url.scheme in ("https", "wss") or public.startswith("https://")


def write_session(
    request: Request, response: Response, session: WebSession, settings: Settings
) -> None:
    data = {"c": session.csrf, "s": session.secret}
    value = _serializer(settings).dumps(data)
    response.set_cookie(
        COOKIE,
        value,
        max_age=settings.session_max_age_seconds,
        path="/",
        httponly=True,
        samesite="lax",
        secure=cookie_secure(request, settings),
    )


def clear_session(request: Request, response: Response, settings: Settings) -> None:
    response.delete_cookie(
        COOKIE,
        path="/",
        httponly=True,
        samesite="lax",
        secure=cookie_secure(request, settings),
    )
