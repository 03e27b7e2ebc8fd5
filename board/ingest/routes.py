"""POST /agent/v1/observations: thin, the rules live in the service."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from board.edge import read_body
from board.errors import DomainError, as_unavailable
from board.ingest import service
from board.ingest.store import Outcome
from board.metrics.registry import observations_accepted, observations_rejected, rejection_label

router = APIRouter(prefix="/agent/v1", tags=["agent"])


async def observations(request: Request) -> JSONResponse:
    """Counts each push as accepted or rejected (by reason), then answers it."""
    try:
        response = await store_observation(request)
    except (DomainError, HTTPException) as exc:
        observations_rejected.labels(reason=rejection_label(service.rejection_reason(exc))).inc()
        raise
    except Exception as exc:
        # The database away while the token was looked up: the app's handler answers 503.
        if as_unavailable(exc) is not None:
            observations_rejected.labels(reason=rejection_label("unavailable")).inc()
        raise
    observations_accepted.inc()
    return response


async def store_observation(request: Request) -> JSONResponse:
    """POST /agent/v1/observations: 202 once the observation is committed.

    A plain Starlette route, the only one: every agent pushes here every 30 s, and
    FastAPI's per-request dependency solving cost about a sixth of the server's CPU
    per observation (docs/benchmarks.md). Errors still render through the app's
    handlers, so every 4xx carries a string `detail`.
    """
    runtime: service.IngestParts = request.app.state.runtime
    # The token first: a stranger learns nothing about what the endpoint accepts, and
    # what a host's agent gets wrong is counted on that host.
    principal = await service.authenticate_agent(runtime, request.headers.get("authorization"))
    try:
        service.require_json(request.headers.get("content-type"))
        body = await read_body(request, runtime.settings.max_body_bytes)
    except DomainError as exc:
        await service.record_refused(runtime, principal, exc)
        raise
    outcome, observed_at = await service.accept_observation(runtime, principal, body)
    return JSONResponse(
        {
            "status": "accepted",
            "duplicate": outcome is Outcome.DUPLICATE,
            "observedAt": observed_at.isoformat(),
        },
        status_code=202,
    )


# Unlike add_api_route, Starlette's add_route does not apply the router's prefix.
router.add_route(
    f"{router.prefix}/observations", observations, methods=["POST"], include_in_schema=False
)
