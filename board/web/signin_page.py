"""The sign-in page, shared by password and single sign-on routes."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from board.settings import Settings
from board.web.render import render


def safe_next(value: str | None) -> str:
    """Only a path on this board: never another site (open redirect)."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    if any(ord(c) < 0x20 or c == "\\" for c in value):
        return "/"
    return value


def signin_page(
    request: Request,
    settings: Settings,
    *,
    next: str = "/",
    email: str = "",
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    """The form (when password sign-in is on) and a button per configured provider."""
    context = {
        "next": safe_next(next),
        "email": email,
        "error": error,
        "password_signin": settings.password_signin,
        "providers": [(p.name, p.display_name) for p in settings.sso_providers],
    }
    return render(request, "signin.html", context, status_code=status_code)
