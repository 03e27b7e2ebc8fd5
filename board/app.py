"""The ASGI application: routers, error rendering, the process's runtime."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Literal

from fastapi import Depends, FastAPI
from pydantic import BaseModel

from board.apidocs import install_api_docs, install_openapi
from board.archives.routes import agent_router as archives_agent_router
from board.archives.routes import api_router as archives_api_router
from board.audit.routes import router as audit_router
from board.budgets.routes import router as budgets_router
from board.capacity.routes import router as capacity_router
from board.db.deps import PoolDep
from board.db.urls import resolve_database_url
from board.directory.routes import router as directory_router
from board.edge import BaselineHeadersMiddleware, NegotiatedGZipMiddleware, RequestGuardMiddleware
from board.enrollment.routes import router as enrollment_router
from board.errors import ServiceUnavailable, install_error_handlers
from board.fleet.routes import router as fleet_router
from board.health.metric import GpuHealth
from board.health.routes import router as health_router
from board.hosts.freshness_metric import HostFreshness
from board.hosts.routes import router as hosts_router
from board.httpserver import BodyDeadlineMiddleware
from board.ingest.routes import router as ingest_router
from board.jobs.report_routes import router as jobs_report_router
from board.jobs.routes import agent_router as jobs_agent_router
from board.jobs.routes import router as jobs_router
from board.jsonbodies import refuse_wide_json_bodies
from board.logs import RequestContextMiddleware, install_redaction
from board.maintenance import maintenance_loop
from board.metrics.exposition import mark_process_dead
from board.metrics.http import ReportTimingMiddleware
from board.metrics.routes import router as metrics_router
from board.money.routes import router as money_router
from board.notices.routes import router as notices_router
from board.reports.routes import router as reports_router
from board.reservations.routes import calendar_router
from board.reservations.routes import router as reservations_router
from board.runtime import Runtime
from board.settings import Settings, get_settings
from board.stream.routes import agent_router as stream_agent_router
from board.stream.routes import api_router as stream_api_router
from board.web import install_web
from board.workspaces.routes import me_router
from board.workspaces.routes import router as workspaces_router

log = logging.getLogger(__name__)


GZIP_MINIMUM_BYTES = 1024
# zlib's default: the 2,400-GPU fleet page (1.1 MB) in ~8 ms to 48.7 KB, where level 9
# (Starlette's default) took ~12 ms for 46.9 KB (docs/benchmarks.md, issue 14).
GZIP_LEVEL = 6


API_DESCRIPTION = """\
The board's REST API, for people and scripts, and the agent's (docs/agent-api.md).

**Authentication**: `Authorization: Bearer <token>`. People use a personal API token
(`gua_pat_…`: `gua-board create-user` prints the first, `POST /api/v1/me/api-tokens`
issues more); a host's agent uses its agent token (`gua_agent_…`). Here, **Authorize**
takes either and sends it with "Try it out".

Every refusal is JSON with a readable `detail` sentence; a 422 may add `errors`.
"""


class Health(BaseModel):
    status: Literal["ok"]


# The collector's default first threshold (700 allocations) runs a collection every
# request or two here, since a validated snapshot alone allocates hundreds of containers.
GC_THRESHOLDS = (10_000, 20, 10)


def tune_gc() -> None:
    """For a serving process: a quieter cyclic collector (docs/benchmarks.md, ingest).

    Everything alive after start-up (modules, the app, pools) is moved out of the
    collector's reach with gc.freeze(), so a full collection no longer walks several
    hundred thousand long-lived objects; request garbage is freed by reference counting
    either way. Measured: 0.82-0.88 -> 0.64-0.69 ms of server CPU per observation.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def create_served_app() -> FastAPI:
    """The app as `gua-board serve` runs it in each worker process."""
    return create_app(tune_gc_after_start=True)


def create_app(
    settings: Settings | None = None,
    *,
    run_maintenance: bool = True,
    tune_gc_after_start: bool = False,
) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        install_redaction()  # after the server configured its log handlers
        runtime = Runtime.create(settings, resolve_database_url(settings))
        await runtime.start()
        app.state.runtime = runtime
        task = asyncio.create_task(maintenance_loop(runtime)) if run_maintenance else None
        if run_maintenance:
            runtime.notices.start()  # stopped by runtime.stop()
        if tune_gc_after_start:
            tune_gc()
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
            await runtime.stop()
            mark_process_dead()  # a stopping worker's live gauges no longer count

    # redirect_slashes off: Starlette's slash redirect names the request's Host header in
    # its Location (an open redirect behind a shared cache); /w/{slug} redirects itself.
    app = FastAPI(
        title="GUA Board",
        version="0.1.0",
        description=API_DESCRIPTION,
        lifespan=lifespan,
        redirect_slashes=False,
        # Served by install_api_docs from the board itself (no CDN), within its own CSP.
        docs_url=None,
        redoc_url=None,
        # Before any body is validated: no object wider than the board ever reads.
        dependencies=[Depends(refuse_wide_json_bodies)],
    )
    install_error_handlers(app)
    # Metrics the kit's /metrics computes from the domains' tables when scraped.
    app.state.scrape_time_families = [HostFreshness(), GpuHealth()]
    # Pages, their JSON and reports compressed for browsers that ask (a 2,400-GPU fleet
    # page is ~10x smaller); Server-Sent Events are never buffered (excluded by type).
    app.add_middleware(
        NegotiatedGZipMiddleware, minimum_size=GZIP_MINIMUM_BYTES, compresslevel=GZIP_LEVEL
    )
    # A body trickled in (or stalled) fails the request with 408 instead of holding its
    # handler; headers are bounded one layer down, in the server (board/httpserver.py).
    app.add_middleware(
        BodyDeadlineMiddleware,
        idle_seconds=settings.http_body_idle_seconds,
        total_seconds=settings.http_body_seconds,
    )
    app.add_middleware(ReportTimingMiddleware)
    # Headers no answer should lack, on the errors of no route as well (docs/security.md).
    app.add_middleware(BaselineHeadersMiddleware)
    # NUL in a URL, and bodies over the limit on routes without their own.
    app.add_middleware(RequestGuardMiddleware, max_body_bytes=settings.max_body_bytes)
    # Outermost: every request's id (in logs and the X-Request-ID answer), the access log.
    app.add_middleware(RequestContextMiddleware, log_access=settings.access_log)
    app.include_router(ingest_router)
    app.include_router(archives_agent_router)
    app.include_router(archives_api_router)
    app.include_router(stream_agent_router)
    app.include_router(stream_api_router)
    app.include_router(fleet_router)
    app.include_router(hosts_router)
    app.include_router(health_router)
    app.include_router(capacity_router)
    app.include_router(enrollment_router)
    app.include_router(workspaces_router)
    app.include_router(me_router)
    app.include_router(reports_router)
    app.include_router(jobs_report_router)
    app.include_router(reservations_router)
    app.include_router(calendar_router)
    app.include_router(directory_router)
    app.include_router(money_router)
    app.include_router(budgets_router)
    app.include_router(jobs_agent_router)
    app.include_router(jobs_router)
    app.include_router(audit_router)
    app.include_router(notices_router)
    app.include_router(metrics_router)

    install_api_docs(app)  # its /static/apidocs mount before the pages' /static
    install_web(app)
    install_openapi(app)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Health:
        """Alive: the process serves requests (asks nothing of the database)."""
        return Health(status="ok")

    @app.get("/readyz", include_in_schema=False)
    async def readyz(pool: PoolDep) -> Health:
        """Ready: the database answers within 2 s; else 503 (docs/operations.md)."""
        try:
            async with asyncio.timeout(2), pool.connection() as conn:
                await conn.execute("SELECT 1")
        except Exception:
            raise ServiceUnavailable("The database did not answer within 2 seconds.") from None
        return Health(status="ok")

    return app
