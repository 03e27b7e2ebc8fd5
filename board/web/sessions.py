"""Web sessions: a signed cookie that carries who signed in and the session's CSRF token.

The cookie is stateless (itsdangerous, keyed by the board's secret key, with a max age),
so any worker process can read it. It also carries a fingerprint of the person's password
hash: changing the password ends every session signed in with the old one. Every visitor
gets a session, signed in or not, so the sign-in form has a CSRF token too; signing in
issues a fresh one (no session fixation).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from board.settings import Settings

COOKIE = "gua_session"
CSRF_FIELD = "csrf_token"
_SALT = "gua-board.web-session.v1"


@dataclass(frozen=True)
class WebSession:
    csrf: str
    user_id: int | None = None
    password_tag: str | None = None

    @classmethod
    def anonymous(cls) -> WebSession:
        return cls(csrf=secrets.token_urlsafe(32))

    def signed_in(self, user_id: int, password_hash: str | None) -> WebSession:
        return WebSession(
            csrf=secrets.token_urlsafe(32),
            user_id=user_id,
            password_tag=password_tag(password_hash),
        )

    def csrf_matches(self, submitted: str | None) -> bool:
        return bool(submitted) and hmac.compare_digest(self.csrf, str(submitted))


def password_tag(password_hash: str | None) -> str | None:
    """A short digest of the stored hash: enough to notice a change, useless to a reader."""
    if not password_hash:
        return None
    return hashlib.sha256(password_hash.encode()).hexdigest()[:16]


def _serializer(settings: Settings) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(settings.resolved_secret_key(), salt=_SALT)


def read_session(request: Request, settings: Settings) -> WebSession | None:
    """The request's session, or None when it has none, a forged one, or an expired one."""
    raw = request.cookies.get(COOKIE)
    if not raw:
        return None
    try:
        data = _serializer(settings).loads(raw, max_age=settings.session_max_age_seconds)
    except BadSignature:  # also SignatureExpired
        return None
    if not isinstance(data, dict) or not isinstance(data.get("c"), str):
        return None
    user_id = data.get("u")
    tag = data.get("p")
    return WebSession(
        csrf=data["c"],
        user_id=user_id if isinstance(user_id, int) else None,
        password_tag=tag if isinstance(tag, str) else None,
    )


def write_session(response: Response, session: WebSession, settings: Settings) -> None:
    data = {"c": session.csrf, "u": session.user_id, "p": session.password_tag}
    value = _serializer(settings).dumps(data)
    response.set_cookie(
        COOKIE,
        value,
        max_age=settings.session_max_age_seconds,
        path="/",
        httponly=True,
        samesite="lax",
        secure=bool(settings.cookie_secure),
    )


def clear_session(response: Response, settings: Settings) -> None:
    response.delete_cookie(
        COOKIE, path="/", httponly=True, samesite="lax", secure=bool(settings.cookie_secure)
    )
