"""Agent-facing rules: who is pushing, is the body acceptable, store it durably."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError

from board.auth import tokens
from board.errors import (
    BadRequest,
    DomainError,
    PayloadTooLarge,
    ServiceUnavailable,
    Unauthorized,
    Unprocessable,
    describe_validation_errors,
)
from board.hosts.rejections import record_rejection
from board.ingest.normalize import Observation
from board.ingest.schemas import SnapshotIn
from board.ingest.store import Outcome
from board.runtime import Runtime

log = logging.getLogger(__name__)

_BAD_TOKEN = "Invalid or missing agent token; enroll the host again if it was revoked."


async def authenticate_agent(runtime: Runtime, authorization: str | None) -> tuple[int, int]:
    """The (workspace_id, host_id) an agent token belongs to; never from the payload."""
    secret = tokens.bearer(authorization)
    if secret is None or not secret.startswith(tokens.AGENT):
        raise Unauthorized(_BAD_TOKEN)
    digest = tokens.digest(secret)
    cached = runtime.agent_tokens.get(digest)
    if cached is not None:
        return cached
    async with runtime.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT workspace_id, id FROM hosts WHERE agent_token_hash = %s AND revoked_at IS NULL",
            [digest],
        )
        row = await cur.fetchone()
    if row is None:
        raise Unauthorized(_BAD_TOKEN)
    principal = (int(row[0]), int(row[1]))
    runtime.agent_tokens[digest] = principal
    return principal


def check_body_size(content_length: str | None, limit: int) -> None:
    if content_length is not None and content_length.isdigit() and int(content_length) > limit:
        raise PayloadTooLarge(f"Request body is larger than the limit of {limit} bytes.")


def parse_snapshot(body: bytes) -> SnapshotIn:
    try:
        return SnapshotIn.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        if any(e["type"] == "json_invalid" for e in errors):
            raise BadRequest("Request body is not valid JSON.") from None
        raise Unprocessable(
            describe_validation_errors(list(errors)),
            errors=[{"loc": [str(p) for p in e["loc"]], "msg": e["msg"]} for e in errors],
        ) from None


def check_observed_at(observed_at: datetime, now: datetime, runtime: Runtime) -> None:
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


_REASONS = {400: "invalid_json", 413: "payload_too_large", 422: "invalid_payload"}


async def accept_observation(
    runtime: Runtime, principal: tuple[int, int], body: bytes
) -> tuple[Outcome, datetime]:
    """Validate and store one push; a rejection is counted on the host, then re-raised."""
    workspace_id, host_id = principal
    now = datetime.now(UTC)
    try:
        if len(body) > runtime.settings.max_body_bytes:
            raise PayloadTooLarge(
                f"Request body is larger than the limit of {runtime.settings.max_body_bytes} bytes."
            )
        snapshot = parse_snapshot(body)
        observed_at = snapshot.observed_at()
        check_observed_at(observed_at, now, runtime)
    except DomainError as exc:
        reason = str(exc.extra.get("reason") or _REASONS.get(exc.status_code, "rejected"))
        await record_rejection(runtime.pool, workspace_id, host_id, reason, exc.detail, now)
        raise
    observation = Observation(workspace_id, host_id, observed_at, now, snapshot)
    try:
        outcome = await runtime.writer.submit(observation)
    except Exception:
        log.exception("could not store observation for host %s", host_id)
        raise ServiceUnavailable(
            "The board could not store the observation; retry later."
        ) from None
    if outcome is Outcome.REVOKED:
        runtime.agent_tokens.clear()
        await record_rejection(runtime.pool, workspace_id, host_id, "revoked", _BAD_TOKEN, now)
        raise Unauthorized(_BAD_TOKEN)
    return outcome, observed_at


async def record_too_large(runtime: Runtime, principal: tuple[int, int], exc: DomainError) -> None:
    await record_rejection(
        runtime.pool, principal[0], principal[1], "payload_too_large", exc.detail, datetime.now(UTC)
    )
