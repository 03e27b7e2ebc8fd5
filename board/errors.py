"""Domain errors carry their HTTP status; one handler renders {"detail": "..."}.

A database that is away (restarting, failing over, refusing connections) or cannot
answer now is a 503 with Retry-After, never a 500: `as_unavailable` says which driver
errors mean that, wherever they are raised (at connect, mid-transaction, at commit).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import fastapi.routing
import psycopg
import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection
from starlette.routing import BaseRoute, Match
from starlette.websockets import WebSocket

log = logging.getLogger(__name__)

# A 422 lists at most this many problems: a hostile body can hold thousands.
MAX_LISTED_ERRORS = 20
# What a 503 tells the client to wait: a PostgreSQL restart takes a few seconds.
RETRY_AFTER_SECONDS = 5
DATABASE_UNAVAILABLE = "The database is not available right now; retry in a few seconds."


class DomainError(Exception):
    status_code = 400

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class BadRequest(DomainError):
    status_code = 400


class Unauthorized(DomainError):
    status_code = 401


class Forbidden(DomainError):
    status_code = 403


class NotFound(DomainError):
    status_code = 404


class Conflict(DomainError):
    status_code = 409


class PayloadTooLarge(DomainError):
    status_code = 413


class Unprocessable(DomainError):
    status_code = 422


class TooManyRequests(DomainError):
    status_code = 429


class ServiceUnavailable(DomainError):
    status_code = 503


# psycopg's OperationalError covers a lost or refused connection, a server shutting
# down or recovering, and the pool's PoolTimeout (its subclass); also deadlocks and
# cancelled statements, which a retry may get past as well. SQLAlchemy wraps each in
# its own OperationalError; its TimeoutError is its pool's wait running out.
TRANSIENT_DATABASE_ERRORS: tuple[type[Exception], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    sqlalchemy.exc.TimeoutError,
)


def as_unavailable(exc: BaseException) -> ServiceUnavailable | None:
    """The 503 a database error means when the database is away or cannot answer now;
    None for any other error (a bug stays a 500)."""
    if isinstance(exc, TRANSIENT_DATABASE_ERRORS):
        return ServiceUnavailable(DATABASE_UNAVAILABLE)
    return None


def log_unavailable(connection: HTTPConnection, exc: BaseException) -> None:
    """One line, not a traceback per request: an outage answers many of them."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    log.warning(
        "database unavailable: %s %s answered 503 (%s: %s)",
        connection.scope.get("method", "WEBSOCKET"),
        connection.url.path,
        type(exc).__name__,
        first[:200],
    )


class ErrorOut(BaseModel):
    """Every refusal: one readable sentence (some add fields of their own)."""

    model_config = ConfigDict(title="Error", extra="allow")
    detail: str


class Problem(BaseModel):
    """One problem of a refused request: where (`["query", "from"]`) and what."""

    loc: list[str]
    msg: str


class ValidationErrorOut(BaseModel):
    """A 422: the sentence, and for requests refused by their declared shape the first
    problems (at most MAX_LISTED_ERRORS; a refusal by a rule has only the sentence)."""

    model_config = ConfigDict(title="ValidationError", extra="allow")
    detail: str
    errors: list[Problem] | None = None


_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again.",
        "schema": {"type": "integer", "minimum": 0},
    }
}
# What each refusal means for the REST API, as the OpenAPI says it (board/apidocs.py).
ANSWERS: dict[int, dict[str, Any]] = {
    400: {"description": "A NUL character in the URL, or a request that is not well-formed."},
    401: {
        "description": "No bearer token, or one that is not valid (unknown, revoked, "
        "expired, or of another kind).",
        "headers": {
            "WWW-Authenticate": {
                "description": "`Bearer`: the scheme to answer with.",
                "schema": {"type": "string"},
            }
        },
    },
    403: {"description": "The token's role may not do this."},
    404: {
        "description": "No such workspace for this token (another workspace's is the same "
        "404), or no such item in it."
    },
    408: {"description": "The request body came too slowly."},
    409: {"description": "The request conflicts with the workspace's current state."},
    413: {"description": "The request body is larger than the limit."},
    415: {"description": "The request body is not of the media type the operation takes."},
    422: {
        "description": "The request is not valid: `detail` says why.",
        "model": ValidationErrorOut,
    },
    429: {"description": "Too many such requests for now.", "headers": _RETRY_AFTER},
    503: {
        "description": "The database is not available right now.",
        "headers": _RETRY_AFTER,
    },
}


# A query parameter the handler reads itself and refuses with its own sentence when it is
# missing (after the token: a stranger learns nothing, and an agent's mistake is counted
# on its host): `Query(json_schema_extra=CHECKED_REQUIRED)` marks it required in the
# OpenAPI (board/apidocs.py).
CHECKED_REQUIRED: dict[str, Any] = {"x-checked-required": True}

# What a dependency refuses with, by the dependency: reading a route's signature tells
# which refusals it can answer, and board/apidocs.py writes them into the OpenAPI.
REFUSALS: dict[object, tuple[int, ...]] = {}
_Dependency = TypeVar("_Dependency")


def refuses(*statuses: int) -> Callable[[_Dependency], _Dependency]:
    """Marks a dependency as one that may answer these statuses."""

    def mark(dependency: _Dependency) -> _Dependency:
        REFUSALS[dependency] = statuses
        return dependency

    return mark


def answers(*statuses: int, meaning: dict[int, str] | None = None) -> dict[int | str, Any]:
    """The OpenAPI `responses` of these refusals, with the board's error model; `meaning`
    says what a status means for this operation, where the general words say too little."""
    out: dict[int | str, Any] = {}
    for status in statuses:
        entry = {"model": ErrorOut, **ANSWERS[status]}
        if meaning and status in meaning:
            entry["description"] = meaning[status]
        out[status] = entry
    return out


def error_headers(exc: DomainError) -> dict[str, str] | None:
    """The headers an error's status calls for."""
    if exc.status_code == 401:
        return {"WWW-Authenticate": "Bearer"}
    if exc.status_code == 503:
        return {"Retry-After": str(RETRY_AFTER_SECONDS)}
    return None


# What a value refused by a `pattern` lacks, by pattern: pydantic's own words quote the
# regular expression. Each pattern used on input is registered with its sentence (the
# sentence once said "must not contain NUL" whatever the pattern, a team with a
# right-to-left override or a Linux user name with a space included).
_PATTERN_SENTENCES: dict[str, str] = {}


def explained_pattern(pattern: str, sentence: str) -> str:
    """`pattern`, registered with what a 422 says of a value that fails it."""
    _PATTERN_SENTENCES[pattern] = sentence
    return pattern


NO_NUL = explained_pattern(r"^[^\x00]*$", "must not contain NUL (\\u0000) characters")
NO_CONTROL = explained_pattern(
    r"^[^\x00-\x1f\x7f]*$", "must not contain line breaks or other control characters"
)
# Bidirectional overrides and isolates make a name read as another on the pages (Trojan
# Source, CVE-2021-42574).
NO_CONTROL_OR_BIDI = explained_pattern(
    r"^[^\x00-\x1f\x7f\u202a-\u202e\u2066-\u2069]*$",
    "must not contain line breaks, other control characters or bidirectional control "
    "characters (U+202A-U+202E, U+2066-U+2069)",
)


# What a 422 says of a required query parameter left out or empty, by name (a name that
# is required on one route and optional on another is never missing there). Without one,
# the sentence is pydantic's "<name>: Field required".
_MISSING_SENTENCES: dict[str, str] = {}
_MISSING = frozenset({"missing", "string_too_short"})


def explained_missing(name: str, sentence: str) -> str:
    """`name`, a required query parameter (at least one character), registered with the
    422's sentence when a request leaves it out or sends it empty."""
    _MISSING_SENTENCES[name] = sentence
    return name


def _pattern_sentence(error: Any) -> str | None:
    pattern = (error.get("ctx") or {}).get("pattern")
    if pattern is None:
        # Errors taken without their context (the ingest's) still quote it in pydantic's
        # message: "String should match pattern '<pattern>'".
        msg = str(error.get("msg", ""))
        head, tail = "String should match pattern '", "'"
        if msg.startswith(head) and msg.endswith(tail):
            pattern = msg[len(head) : -len(tail)]
    return _PATTERN_SENTENCES.get(str(pattern))


def describe_validation_errors(errors: list[Any]) -> str:
    """One readable sentence from pydantic's error list (the agent shows only a string)."""
    if not errors:
        return "The request is invalid."
    first = errors[0]
    where = tuple(first.get("loc", ()))
    loc = ".".join(str(p) for p in where if p not in ("body", "query", "path"))
    msg = str(first.get("msg", "invalid value"))
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    if first.get("type") in _MISSING and len(where) == 2 and where[0] == "query":
        sentence = _MISSING_SENTENCES.get(str(where[1]))
        if sentence is not None:
            return f"{sentence}{more}"
    if first.get("type") == "string_pattern_mismatch":
        msg = _pattern_sentence(first) or msg
    return f"{loc}: {msg}{more}" if loc else f"{msg}{more}"


def every_route(routes: Sequence[BaseRoute]) -> Iterator[Any]:
    """Each route of an app, those of its included routers too, as FastAPI sees them
    (its own OpenAPI walks them so; a FastAPI without `iter_route_contexts` kept the
    routes of an included router in the app's list)."""
    contexts = getattr(fastapi.routing, "iter_route_contexts", None)
    if contexts is None:
        yield from routes
    else:
        yield from contexts(routes)


def _literal_length(path_format: str) -> int:
    """How much of a route's path is written out rather than a parameter."""
    return len(re.sub(r"\{[^}]*\}", "", path_format))


def allowed_methods(request: Request) -> str:
    """The `Allow` of a 405: the methods of the resource at the request's path.

    Starlette's names only those of the first route whose path matched, so GET /members
    answered "Allow: GET" though POST /members exists (RFC 9110 §15.5.6: the methods the
    target resource supports). Where several route paths match (`/members/{email:path}`
    also matches `/members/x/sign-out`), the resource is the most literal one, as an
    OpenAPI path with fewer parameters is matched first."""
    matching: list[tuple[int, set[str]]] = []
    for route in every_route(request.app.router.routes):
        # PARTIAL: the path matches and the method does not (FULL: both do).
        if getattr(route, "methods", None) and getattr(route, "path_format", None):
            match, _ = route.matches(request.scope)
            if match is not Match.NONE:
                matching.append((_literal_length(route.path_format), set(route.methods)))
    if not matching:
        return ""
    most = max(length for length, _ in matching)
    methods = set().union(*(m for length, m in matching if length == most))
    return ", ".join(sorted(methods))


def install_error_handlers(app: FastAPI) -> None:
    async def domain(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, DomainError)
        return JSONResponse(
            {"detail": exc.detail, **exc.extra},
            status_code=exc.status_code,
            headers=error_headers(exc),
        )

    async def database(connection: HTTPConnection, exc: Exception) -> Response | None:
        """Registered for TRANSIENT_DATABASE_ERRORS only, so every one is a 503."""
        unavailable = ServiceUnavailable(DATABASE_UNAVAILABLE)
        log_unavailable(connection, exc)
        if isinstance(connection, WebSocket):
            # Before the upgrade: a 503 where the server can answer one; else the
            # close code that means "try again later".
            if "websocket.http.response" in connection.scope.get("extensions", {}):
                await connection.send_denial_response(
                    JSONResponse(
                        {"detail": unavailable.detail},
                        status_code=503,
                        headers=error_headers(unavailable),
                    )
                )
            else:
                await connection.close(code=1013)
            return None
        # A page answers with a page (board/web/render.py: PageRoute.render_error).
        render_error = getattr(connection.scope.get("route"), "render_error", None)
        if render_error is not None and isinstance(connection, Request):
            response: Response = render_error(connection, unavailable)
            return response
        return JSONResponse(
            {"detail": unavailable.detail}, status_code=503, headers=error_headers(unavailable)
        )

    async def validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        every = list(exc.errors())
        # The detail counts them all; the list stops at a few (each quotes what was sent).
        errors = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))}
            for e in every[:MAX_LISTED_ERRORS]
        ]
        return JSONResponse(
            {"detail": describe_validation_errors(every), "errors": errors}, status_code=422
        )

    async def http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else "Request failed."
        headers = exc.headers
        allow = allowed_methods(request) if exc.status_code == 405 else ""
        if allow:
            headers = {**(headers or {}), "Allow": allow}
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers)

    app.add_exception_handler(DomainError, domain)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http)
    for kind in TRANSIENT_DATABASE_ERRORS:
        app.add_exception_handler(kind, database)  # type: ignore[arg-type]
