"""Report latency by report name, read from the matched route's template after routing.

Pure ASGI and outside every route, so board/reports needs no change: the label is the
last part of the template (`/api/v1/workspaces/{slug}/reports/usage` -> `usage`), never
the path itself, which names a workspace.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from board.metrics.registry import report_seconds

REPORTS_PREFIX = "/api/v1/workspaces/"
REPORTS_MARK = "/reports/"


def report_name(scope: Scope) -> str | None:
    """The matched report route's name, or None for any other request."""
    route = scope.get("route")
    template = getattr(route, "path", None)
    if not isinstance(template, str) or REPORTS_MARK not in template:
        return None
    return template.rsplit("/", 1)[-1] or None


class ReportTimingMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or not (
            path.startswith(REPORTS_PREFIX) and REPORTS_MARK in path
        ):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                name = report_name(scope)
                if name is not None:
                    report_seconds.labels(report=name).observe(time.perf_counter() - started)

        await self.app(scope, receive, timed_send)
