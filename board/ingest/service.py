"""Agent-facing rules: who is pushing, is the body acceptable, store it durably."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from board.errors import (
    MAX_LISTED_ERRORS,
    BadRequest,
    DomainError,
    ServiceUnavailable,
    Unauthorized,
    Unprocessable,
    as_unavailable,
    describe_validation_errors,
)
from board.hosts.rejections import record_rejection, safe_text
from board.ingest.access import BAD_TOKEN, AgentAccess
from board.ingest.normalize import Observation
from board.ingest.schemas import SnapshotIn
from board.ingest.store import Outcome, TooManyGpus
from board.ingest.writer import IngestWriter
from board.jsonbodies import TOO_WIDE_DETAIL, has_too_wide_object
from board.settings import Settings


class IngestParts(Protocol):
    """What the agent side needs of its process (board.runtime.Runtime has it all)."""

    settings: Settings
    pool: AsyncConnectionPool[Any]
    writer: IngestWriter
    access: AgentAccess


log = logging.getLogger(__name__)


class UnsupportedMediaType(DomainError):
    status_code = 415


def require_json(content_type: str | None) -> None:
    """The agent endpoints take JSON only (every released agent says so); 415 otherwise."""
    media = (content_type or "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise UnsupportedMediaType(
            "The request body must be JSON, sent with Content-Type: application/json."
        )


def invalid(exc: ValidationError) -> DomainError:
    """A pydantic failure as the agent sees it: 400 for broken JSON, else one 422 sentence.

    Details quote what was sent (a key, a location), so they are made safe for
    PostgreSQL and JSON and bounded (board.hosts.rejections.safe_text).
    """
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    if any(e["type"] == "json_invalid" for e in errors):
        return BadRequest("Request body is not valid JSON.")
    return Unprocessable(
        safe_text(describe_validation_errors(list(errors))),
        errors=[
            {"loc": [safe_text(str(p), 100) for p in e["loc"]], "msg": safe_text(e["msg"], 200)}
            for e in errors[:MAX_LISTED_ERRORS]
        ],
    )


async def authenticate_agent(runtime: IngestParts, authorization: str | None) -> tuple[int, int]:
    """The (workspace_id, host_id) an agent token belongs to; never from the payload."""
    host = await runtime.access.authenticate(authorization)
    return host.key


def parse_snapshot(body: bytes) -> SnapshotIn:
    if has_too_wide_object(body):
        raise Unprocessable(TOO_WIDE_DETAIL)
    try:
        return SnapshotIn.model_validate_json(body)
    except ValidationError as exc:
        raise invalid(exc) from None


def check_observed_at(observed_at: datetime, now: datetime, runtime: IngestParts) -> None:
    settings = runtime.settings
    if observed_at > now + timedelta(seconds=settings.max_future_seconds):
        raise Unprocessable(
            f"observedAt is more than {settings.max_future_seconds} seconds ahead of the "
            f"board's clock ({now.isoformat()}); check the host's clock.",
            reason="observed_at_in_future",
        )
    if observed_at < now - timedelta(days=settings.raw_retention_days):
        raise Unprocessable(
            f"observedAt is older than the raw retention of {settings.raw_retention_days} days.",
            reason="observed_at_too_old",
        )


# Why a push was refused, by its answer's status, when the error names no reason of its
# own: what the host's rejections record and the metrics count (board/metrics/registry.py).
_REASON_OF_STATUS = {
    400: "invalid_json",
    401: "unauthorized",
    408: "request_timeout",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_payload",
    503: "unavailable",
}


def rejection_reason(exc: DomainError | HTTPException) -> str:
    """The reason a refused push is recorded and counted under: the error's own, else
    its status's, else `rejected` (which the metrics count as `other`)."""
    reason = exc.extra.get("reason") if isinstance(exc, DomainError) else None
    if isinstance(reason, str) and reason:
        return reason
    return _REASON_OF_STATUS.get(exc.status_code, "rejected")


async def accept_observation(
    runtime: IngestParts, principal: tuple[int, int], body: bytes
) -> tuple[Outcome, datetime]:
    """Validate and store one push; a rejection is counted on the host, then re-raised.

    `body` is within the size limit already: the route reads it with board.edge.read_body.
    """
    workspace_id, host_id = principal
    now = datetime.now(UTC)
    try:
        snapshot = parse_snapshot(body)
        observed_at = snapshot.observed_at()
        check_observed_at(observed_at, now, runtime)
    except DomainError as exc:
        await record_rejection(
            runtime.pool, workspace_id, host_id, rejection_reason(exc), exc.detail, now
        )
        raise
    observation = Observation(workspace_id, host_id, observed_at, now, snapshot)
    try:
        outcome = await runtime.writer.submit(observation)
    except TooManyGpus as exc:
        await record_rejection(
            runtime.pool, workspace_id, host_id, "too_many_gpus", exc.detail, now
        )
        raise
    except Exception as exc:
        if as_unavailable(exc) is None:  # the writer logged a database outage already
            log.exception("could not store observation for host %s", host_id)
        raise ServiceUnavailable(
            "The board could not store the observation; retry later."
        ) from None
    if outcome is Outcome.REVOKED:
        # Revoked without a notice reaching this process (e.g. by hand in the database).
        runtime.access.forget_host(workspace_id, host_id)
        await record_rejection(runtime.pool, workspace_id, host_id, "revoked", BAD_TOKEN, now)
        raise Unauthorized(BAD_TOKEN)
    return outcome, observed_at


async def record_refused(
    runtime: IngestParts, principal: tuple[int, int], exc: DomainError
) -> None:
    """A push refused before its body was parsed (413, 415), counted on the host."""
    workspace_id, host_id = principal
    await record_rejection(
        runtime.pool, workspace_id, host_id, rejection_reason(exc), exc.detail, datetime.now(UTC)
    )
