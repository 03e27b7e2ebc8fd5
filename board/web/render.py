"""Templates, their filters, and the route class that turns errors into pages."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from jinja2 import StrictUndefined

from board.errors import DomainError, describe_validation_errors, error_headers
from board.runtime import Runtime
from board.web.deps import SignInRequired
from board.web.sessions import CSRF_FIELD, WebSession, write_session

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

# Pages are only ever drawn from our own origin: no inline script, no third party.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def _parse(value: str | datetime | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def ago(value: str | datetime | None, now: datetime | None = None) -> str:
    """'12 s ago', '5 min ago', '3 h ago', '2 d ago', or 'never'."""
    at = _parse(value)
    if at is None:
        return "never"
    seconds = max(0, int(((now or datetime.now(UTC)) - at).total_seconds()))
    if seconds < 90:
        return f"{seconds} s ago"
    if seconds < 90 * 60:
        return f"{seconds // 60} min ago"
    if seconds < 36 * 3600:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} d ago"


def gib(mb: int | float | None) -> str:
    if mb is None:
        return "–"
    return f"{mb / 1024:.1f}"


def hours(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def kwh(value: float | None) -> str:
    """Energy for a page: two decimals under 10 kWh (a day of one GPU), one under 1,000."""
    if value is None:
        return "–"
    digits = 2 if value < 10 else 1 if value < 1000 else 0
    return f"{value:,.{digits}f} kWh"


def pct(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f} %"


def share(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f} %"


def when(value: str | datetime | None) -> str:
    at = _parse(value)
    if at is None:
        return "–"
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _static_version() -> str:
    """A digest of the shipped static files: a new release never serves a cached old script."""
    digest = hashlib.sha256()
    for path in sorted(STATIC.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


_STATIC_VERSION = _static_version()


def static_url(path: str) -> str:
    # Relative to the site root, so the page works behind a proxy that terminates TLS.
    return f"/static/{path}?v={_STATIC_VERSION}"


templates = Jinja2Templates(directory=str(TEMPLATES))
# A misspelled name or attribute is an error, not a blank cell.
templates.env.undefined = StrictUndefined


def path_segment(value: object) -> str:
    """A value as one URL path segment: Jinja's urlencode leaves "/" as it is, so the
    member "z/../member@x" had a Remove button that removed "member@x"."""
    return quote(str(value), safe="")


templates.env.filters.update(
    ago=ago,
    gib=gib,
    hours=hours,
    kwh=kwh,
    pct=pct,
    share=share,
    when=when,
    path_segment=path_segment,
)
templates.env.globals.update(
    static_url=static_url,
    csrf_field=CSRF_FIELD,
    state_labels={
        "active": "Active",
        "idle_held": "Idle, held",
        "idle": "Idle",
        "not_observed": "Not observed",
    },
)


def finish(request: Request, response: Response) -> Response:
    """Headers every page carries, and the cookie of a session created by this request."""
    response.headers.update(SECURITY_HEADERS)
    session = getattr(request.state, "web_session", None)
    if getattr(request.state, "write_session", False) and isinstance(session, WebSession):
        runtime: Runtime = request.app.state.runtime
        write_session(request, response, session, runtime.settings)
    return response


def render(
    request: Request, name: str, context: dict[str, Any], status_code: int = 200
) -> Response:
    session = getattr(request.state, "web_session", None)
    base = {"csrf_token": session.csrf if isinstance(session, WebSession) else ""}
    response = templates.TemplateResponse(
        request, name, {**base, **context}, status_code=status_code
    )
    return finish(request, response)


def redirect(request: Request, url: str) -> Response:
    return finish(request, RedirectResponse(url, status_code=303))


def _wants_json(request: Request) -> bool:
    return request.url.path.endswith((".json", ".csv")) or "application/json" in (
        request.headers.get("accept") or ""
    )


class PageRoute(APIRoute):
    """Errors of a page render as a page; no session sends the browser to the sign-in form."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInRequired:
                if _wants_json(request):
                    return finish(request, JSONResponse({"detail": "Sign in first."}, 401))
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return redirect(request, f"/signin?next={quote(target, safe='')}")
            except DomainError as exc:
                return error_answer(request, exc)
            except RequestValidationError as exc:
                # A page's query or form past its bounds (a hand-edited URL): a page saying
                # which, for a browser; a script keeps the API's JSON with its list.
                if _wants_json(request):
                    raise
                detail = describe_validation_errors(list(exc.errors()))
                return error_page(request, 422, detail)

        return handle

    @staticmethod
    def render_error(request: Request, exc: DomainError) -> Response:
        """How the app's handler of a database outage (board/errors.py) answers a page.

        That error is not caught in `handle` above: it must first pass through the
        request's session, which then rolls its dead transaction back instead of
        committing it (and failing again, as a 500)."""
        return error_answer(request, exc)


def error_answer(request: Request, exc: DomainError) -> Response:
    """A page's error as a page, or as JSON to a script; a 503 says when to retry."""
    headers = error_headers(exc) if exc.status_code == 503 else None
    if _wants_json(request):
        body = {"detail": exc.detail}
        return finish(request, JSONResponse(body, exc.status_code, headers=headers))
    response = error_page(request, exc.status_code, exc.detail)
    response.headers.update(headers or {})
    return response


def error_page(request: Request, status_code: int, detail: str) -> Response:
    titles = {
        403: "Not allowed",
        404: "Not found",
        422: "Not a request this page can answer",
        429: "Too many attempts",
        503: "Not available right now",
    }
    return render(
        request,
        "error.html",
        {"title": titles.get(status_code, "Something went wrong"), "detail": detail},
        status_code=status_code,
    )
