"""POST /agent/v1/observations and the claim: thin, the rules live in the services."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse

from board.enrollment import service as enrollment
from board.errors import PayloadTooLarge
from board.ingest import service
from board.ingest.schemas import ClaimResponse
from board.ingest.store import Outcome
from board.runtime import RuntimeDep, SessionDep

router = APIRouter(prefix="/agent/v1", tags=["agent"])


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes the limit (before any parsing)."""
    service.check_body_size(request.headers.get("content-length"), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"Request body is larger than the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


@router.post("/enrollments/claim", status_code=201, response_model=ClaimResponse)
async def claim(request: Request, runtime: RuntimeDep, session: SessionDep) -> ClaimResponse:
    body = await read_body(request, 64 * 1024)
    return await enrollment.claim(session, body)


@router.post("/observations", status_code=202)
async def observations(
    request: Request,
    runtime: RuntimeDep,
    authorization: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    principal = await service.authenticate_agent(runtime, authorization)
    try:
        body = await read_body(request, runtime.settings.max_body_bytes)
    except PayloadTooLarge as exc:
        await service.record_too_large(runtime, principal, exc)
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
