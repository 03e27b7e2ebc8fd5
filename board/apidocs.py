"""The REST API described as it answers: /openapi.json, and /docs and /redoc from the board.

- `install_openapi`: every operation lists the refusals it can answer, with the board's
  error model (`{"detail": "<sentence>"}`, a 422 adding `errors`), found from what can
  refuse it: the edge (400 for a NUL in the URL, 503 while the database is away), a body
  (408, 413), its parameters (422), and each dependency in its signature that says what it
  refuses (board.errors.refuses: 401 for the token, 404 for the workspace, 403 for a role).
  A route's own `responses=` adds what its service refuses (409, 429, ...).
- `install_api_docs`: Swagger UI at /docs and ReDoc at /redoc, from the files the
  fastapi-offline package ships (no CDN: the board's CSP allows none, and a lab may be
  offline), started by the board's own script: the page's CSP allows no inline script
  (docs/adr/0011-api-docs-served-by-the-board.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from html import escape
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from board.errors import (
    ANSWERS,
    CHECKED_REQUIRED,
    REFUSALS,
    ErrorOut,
    ValidationErrorOut,
    every_route,
)

# Whatever the operation: the request guard refuses a NUL in the URL (400), and any
# database call may find the database away (503).
EVERY_OPERATION = (400, 503)
# An operation that reads a body: it may come too slowly (408) or be too large (413).
WITH_BODY = (408, 413)
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
(_MARKER,) = CHECKED_REQUIRED

ASSETS_URL = "/static/apidocs"
ASSETS = Path(fastapi_offline.__file__).resolve().parent / "static"
STARTER = "/static/apidocs.js"  # board/web/static/apidocs.js

# The docs pages' own policy: scripts and styles from the board only, as on every page;
# Swagger UI and ReDoc style their elements at run time (ReDoc writes <style> elements,
# hence 'unsafe-inline' for styles, never for scripts), ReDoc's search runs in a worker
# made from a blob, and "Try it out" calls the API on the same origin.
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
    "worker-src 'self' blob:; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
DOCS_HEADERS = {
    "Content-Security-Policy": DOCS_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def _dependencies(dependant: Dependant) -> Iterator[Dependant]:
    for sub in dependant.dependencies:
        yield sub
        yield from _dependencies(sub)


def operations(app: FastAPI) -> Iterator[Any]:
    """The app's routes that are operations of its OpenAPI (an APIRoute, as FastAPI sees it
    once included: path, methods, dependant, body_field)."""
    for route in every_route(app.routes):
        if isinstance(getattr(route, "original_route", route), APIRoute):
            if route.include_in_schema:
                yield route


def refusals_of(route: Any) -> list[int]:
    """The statuses an operation can refuse with, whatever its service says."""
    found = set(EVERY_OPERATION)
    reads_body = route.body_field is not None or "requestBody" in (route.openapi_extra or {})
    if reads_body:
        found.update(WITH_BODY)
    dependants = [route.dependant, *_dependencies(route.dependant)]
    if reads_body or any(d.query_params or d.path_params or d.header_params for d in dependants):
        found.add(422)
    if set(route.methods) & _BODY_METHODS and route.path_format.startswith("/api/"):
        found.add(422)  # a JSON body too wide is refused on any of them (board.jsonbodies)
    for dependant in dependants:
        found.update(REFUSALS.get(dependant.call, ()))
    return sorted(found)


def _refusal(status: int) -> dict[str, Any]:
    """A refusal as the OpenAPI writes it, its body the board's error model."""
    entry = dict(ANSWERS[status])
    model = entry.pop("model", ErrorOut)
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {**entry, "content": {"application/json": {"schema": ref}}}


def _error_models() -> dict[str, Any]:
    """The error models' schemas, as components."""
    found: dict[str, Any] = {}
    for model in (ErrorOut, ValidationErrorOut):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        found.update(schema.pop("$defs", {}))
        found[model.__name__] = schema
    return found


def _mark_checked_required(operation: dict[str, Any]) -> None:
    """A parameter the handler requires itself (board.errors.CHECKED_REQUIRED) is required
    here: a string, never null (a query string cannot send one)."""
    for parameter in operation.get("parameters", ()):
        schema = parameter.get("schema", {})
        if not schema.pop(_MARKER, False):
            continue
        parameter["required"] = True
        kinds = [k for k in schema.pop("anyOf", ()) if k.get("type") != "null"]
        parameter["schema"] = {**(kinds[0] if len(kinds) == 1 else {}), **schema}


def openapi_schema(app: FastAPI) -> dict[str, Any]:
    """FastAPI's OpenAPI of the app, each operation with every refusal it can answer.

    What a route's own `responses=` says of a status (its meaning there) is kept; FastAPI's
    default 422 (`{"detail": [ValidationError]}`, which the board never sends) is replaced
    by the board's."""
    schema = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        description=app.description,
        routes=app.routes,
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for route in operations(app):
        for method in route.methods:
            operation = schema["paths"][route.path_format].get(method.lower())
            if operation is None:
                continue
            _mark_checked_required(operation)
            responses = operation.setdefault("responses", {})
            declared = {int(s) for s in responses if s.isdigit() and int(s) in ANSWERS}
            for status in sorted(declared.union(refusals_of(route))):
                general = _refusal(status)
                own = responses.get(str(status), {})
                if status == 422:
                    own = {k: v for k, v in own.items() if k not in ("content", "description")}
                responses[str(status)] = {**general, **own, "content": general["content"]}
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    components.update(_error_models())
    return schema


def install_openapi(app: FastAPI) -> None:
    """/openapi.json as `openapi_schema` says, built once."""

    def cached() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = openapi_schema(app)
        return app.openapi_schema

    app.openapi = cached  # type: ignore[method-assign]


def _page(request: Request, title: str, element: str, script: str, css: str = "") -> HTMLResponse:
    """The page: an element the viewer fills from /openapi.json, the viewer's files, and
    the board's starter script (no inline script)."""
    root = escape(request.scope.get("root_path", ""))
    stylesheet = f'<link rel="stylesheet" href="{root}{ASSETS_URL}/{css}">\n' if css else ""
    spec = escape(f"{root}{request.app.openapi_url}")
    html = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<link rel="icon" href="{root}/static/favicon.svg">
{stylesheet}</head>
<body>
<div id="{element}" data-spec="{spec}"></div>
<script src="{root}{ASSETS_URL}/{script}"></script>
<script src="{root}{STARTER}"></script>
</body>
</html>
"""
    return HTMLResponse(html, headers=DOCS_HEADERS)


def install_api_docs(app: FastAPI) -> None:
    """/docs and /redoc, and the files they load; before the board's own /static mount."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="apidocs")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        """Swagger UI: every operation, and "Authorize" with a bearer token."""
        title = f"{app.title} API"
        return _page(request, title, "swagger-ui", "swagger-ui-bundle.js", "swagger-ui.css")

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        """ReDoc: the same description, for reading."""
        return _page(request, f"{app.title} API reference", "redoc", "redoc.standalone.js")
