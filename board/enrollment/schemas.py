"""Enrollment as the API shows it: issuing and listing tokens (admins), the agent's claim.

Attributes are snake_case (templates read `token.token_prefix`); the JSON keys are their
camelCase aliases, in declaration order: the field order here is the wire order.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

from board.ingest.schemas import NO_NUL
from board.readmodels import IsoTime, ReadModel

TokenState = Literal["active", "claimed", "revoked", "expired"]


class IssueRequest(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, extra="forbid")

    # PostgreSQL text cannot hold NUL: refused here, not by the database.
    display_name: Annotated[str, StringConstraints(max_length=255, pattern=NO_NUL)] | None = None
    expires_in_hours: Annotated[float, Field(gt=0, le=720)] | None = None


class IssuedEnrollment(ReadModel):
    """A new enrollment token: the secret is in this answer only, never again."""

    # `token` and `prefix` are the names the CLI and the demo read; the JSON keys stay.
    token: Annotated[str, Field(alias="enrollmentToken", repr=False)]
    prefix: Annotated[str, Field(alias="tokenPrefix")]
    expires_at: IsoTime


class EnrollmentTokenOut(ReadModel):
    """A token as admins see it listed: the public prefix, never the secret."""

    token_prefix: str
    display_name: str | None
    state: TokenState
    created_at: IsoTime
    expires_at: IsoTime
    claimed_at: IsoTime | None
    # The public hostId of the host that claimed it.
    claimed_by_host_id: str | None


class EnrollmentTokenList(ReadModel):
    enrollment_tokens: list[EnrollmentTokenOut]


class RevokedEnrollment(ReadModel):
    token_prefix: str
    state: TokenState


class ClaimRequest(BaseModel):
    """`POST /agent/v1/enrollments/claim`, as agent-api.md defines it: strict, nothing extra."""

    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", strict=True, frozen=True)

    enrollment_token: Annotated[str, StringConstraints(min_length=1, max_length=512)]
    hostname: Annotated[str, StringConstraints(max_length=255, pattern=NO_NUL)] | None = None
    agent_version: Annotated[str, StringConstraints(max_length=64, pattern=NO_NUL)] | None = None
    driver_version: Annotated[str, StringConstraints(max_length=64, pattern=NO_NUL)] | None = None

    @model_validator(mode="after")
    def _token_not_blank(self) -> Self:
        if not self.enrollment_token.strip():
            raise ValueError("enrollmentToken must not be blank")
        return self


class ClaimResponse(ReadModel):
    host_id: str
    display_name: str
    agent_token: Annotated[str, Field(repr=False)]
    token_prefix: str
