"""Every route the board has, found at run time: a route added later is swept too.

Two sources, joined: the served `/openapi.json` (the API as clients see it) and the app
object itself (`board.app.create_app(...)`, never started), which also knows the pages,
the agent's plain routes and WebSockets that the schema leaves out, and each route's
query and form fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PARAM = re.compile(r"{([^}:]+)(?::[^}]+)?}")
_SKIP = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


@dataclass(frozen=True)
class Endpoint:
    method: str  # GET, POST, … or WS
    path: str  # the template, e.g. /api/v1/workspaces/{slug}/hosts/{host_id}
    query: tuple[str, ...] = ()
    form: tuple[str, ...] = ()
    # The JSON body's fields when the body is a model; ("*",) for a free-form object.
    json_fields: tuple[str, ...] = ()
    has_json_body: bool = False

    @property
    def path_params(self) -> list[str]:
        return _PARAM.findall(self.path)

    @property
    def is_page(self) -> bool:
        """Server-rendered for people: cookie sign-in, forms with a CSRF token."""
        return not self.path.startswith(("/api/", "/agent/")) and self.path != "/healthz"

    @property
    def is_agent(self) -> bool:
        return self.path.startswith("/agent/")

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def _walk(dependant: Any, found: dict[str, list[Any]]) -> None:
    for kind in ("query_params", "body_params"):
        found.setdefault(kind, []).extend(getattr(dependant, kind, []))
    for sub in getattr(dependant, "dependencies", []):
        _walk(sub, found)


def _model_fields(annotation: Any) -> tuple[str, ...] | None:
    """A pydantic model's field names (also inside `Model | None`); None if not a model."""
    candidates = [annotation, *getattr(annotation, "__args__", ())]
    for candidate in candidates:
        fields = getattr(candidate, "model_fields", None)
        if isinstance(fields, dict):
            return tuple(fields)
    return None


def _from_app(data_dir: Path, database_url: str) -> list[Endpoint]:
    from fastapi import routing

    from board.app import create_app
    from board.settings import Settings

    app = create_app(Settings(database_url=database_url, data_dir=data_dir))
    iterate = getattr(routing, "iter_route_contexts", None)
    contexts = list(iterate(app.routes)) if iterate else list(app.routes)
    endpoints = []
    for route in contexts:
        path = getattr(route, "path", None)
        if not isinstance(path, str) or path in _SKIP or path.startswith("/static"):
            continue
        dependant = getattr(route, "dependant", None)
        methods = getattr(route, "methods", None)
        if not methods:  # a WebSocket route
            endpoints.append(Endpoint("WS", path))
            continue
        found: dict[str, list[Any]] = {}
        if dependant is not None:
            _walk(dependant, found)
        query = tuple(p.alias for p in found.get("query_params", []))
        form: list[str] = []
        json_fields: list[str] = []
        has_json = False
        for param in found.get("body_params", []):
            info = param.field_info
            if type(info).__name__ == "Form":
                form.append(param.alias)
                continue
            has_json = True
            fields = _model_fields(getattr(info, "annotation", None))
            json_fields.extend(fields if fields is not None else ("*",))
        for method in sorted(set(methods) - {"HEAD"}):
            endpoints.append(
                Endpoint(method, path, query, tuple(form), tuple(json_fields), has_json)
            )
    return endpoints


def _from_openapi(schema: dict[str, Any]) -> list[Endpoint]:
    endpoints = []
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if method.upper() not in {"GET", "POST", "PUT", "PATCH", "DELETE"}:
                continue
            query = tuple(
                p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"
            )
            has_json = "requestBody" in operation
            endpoints.append(Endpoint(method.upper(), path, query, (), (), has_json))
    return endpoints


def _shape(path: str) -> str:
    return _PARAM.sub("{}", path)


def discover(schema: dict[str, Any], data_dir: Path, database_url: str) -> list[Endpoint]:
    """The app's routes, plus any the served schema lists that the app object did not."""
    found = _from_app(data_dir, database_url)
    known = {(e.method, _shape(e.path)) for e in found}
    for extra in _from_openapi(schema):
        if (extra.method, _shape(extra.path)) not in known:
            found.append(extra)
    return sorted(found, key=lambda e: (e.path, e.method))
