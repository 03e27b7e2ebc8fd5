"""Workspaces as the API shows them: settings, members, personal API tokens.

Attributes are snake_case (templates read `settings.retention_days`); the JSON keys are
their camelCase aliases, in declaration order: the field order here is the wire order.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from annotated_types import Ge, Le
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from board.errors import NO_CONTROL
from board.readmodels import IsoTime, ReadModel
from board.zones import iana_zone


class SampleGapValue(ReadModel):
    """One dated value of maxSampleGap: in force from `from` (null: from the beginning)
    until the next value's `from`."""

    seconds: int
    from_: IsoTime | None = Field(alias="from")


class WorkspaceSettings(ReadModel):
    max_sample_gap_seconds: int
    stale_after_seconds: int
    timezone: str
    retention_days: int
    max_gpus_per_host: int
    max_reservation_days: int
    idle_held_notice_minutes: int
    reservation_idle_notice_minutes: int
    digest_hour: int | None
    max_sample_gap_history: list[SampleGapValue]
    # Fleet health: a GPU at or above this temperature is hot (board/health).
    hot_temperature_c: int
    # Scheduler jobs: a job's GPU unused or idle-held this long is told to its user, this
    # long to the account's contacts and the admins (board/notices/job_detect.py).
    job_idle_notice_minutes: int
    job_idle_escalate_minutes: int


def _not_null(value: object) -> object:
    # Every setting always has a value: null is not "unchanged", it is refused.
    if value is None:
        raise ValueError("a setting cannot be null")
    return value


def _iana_zone(name: str | None) -> str | None:
    if name is not None:
        try:
            iana_zone(name)
        except ValueError:
            raise ValueError("not an IANA time zone") from None
    return name


NotNull = BeforeValidator(_not_null)


# Nothing is observed before it; and a time this far from the calendar's ends can be
# shown in any zone (0001-01-01T00:00Z is year 0 in New York: Python has no such year).
EARLIEST_FROM = datetime(1970, 1, 1, tzinfo=UTC)


def _instant(value: object) -> object:
    """An ISO 8601 time with its zone offset ("Z" too), from 1970 on; a naive time is refused."""
    if isinstance(value, str) and len(value) <= 40:
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError("not a time") from None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError("not a time with a zone offset")
    try:
        # Year 1 at +14:00 or year 9999 at -12:00 is no instant Python can hold in UTC.
        in_utc = value.astimezone(UTC)
    except OverflowError:
        raise ValueError("not a time Python can hold") from None
    if in_utc < EARLIEST_FROM:
        raise ValueError("before 1970")
    return value


class SettingsPatch(BaseModel):
    """`PATCH …/settings` and the admin page's form: only the settings sent change.

    Strict (`"90"` and `true` are not whole numbers), unknown names refused; every
    refusal is one sentence (a 422's `detail`), the same from the API and the page.
    """

    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", strict=True, frozen=True)

    max_sample_gap_seconds: Annotated[int | None, NotNull, Field(ge=1, le=86400)] = None
    # When that value takes effect (default: now); may be back-dated (board.rollups.gaps).
    max_sample_gap_from: Annotated[datetime | None, NotNull, BeforeValidator(_instant)] = None
    stale_after_seconds: Annotated[int | None, NotNull, Field(ge=1, le=86400)] = None
    timezone: Annotated[str | None, NotNull, AfterValidator(_iana_zone)] = None
    retention_days: Annotated[int | None, NotNull, Field(ge=1, le=3650)] = None
    max_gpus_per_host: Annotated[int | None, NotNull, Field(ge=1, le=4096)] = None
    max_reservation_days: Annotated[int | None, NotNull, Field(ge=1, le=366)] = None
    idle_held_notice_minutes: Annotated[int | None, NotNull, Field(ge=1, le=10080)] = None
    reservation_idle_notice_minutes: Annotated[int | None, NotNull, Field(ge=1, le=10080)] = None
    # The one setting that may be null: no daily digest.
    digest_hour: Annotated[int | None, Field(ge=0, le=23)] = None
    hot_temperature_c: Annotated[int | None, NotNull, Field(ge=30, le=120)] = None
    # Checked against each other (escalate > notice) where the row's values are known.
    job_idle_notice_minutes: Annotated[int | None, NotNull, Field(ge=1, le=10080)] = None
    job_idle_escalate_minutes: Annotated[int | None, NotNull, Field(ge=2, le=10080)] = None

    @model_validator(mode="wrap")
    @classmethod
    def _one_sentence(
        cls, data: Any, handler: ModelWrapValidatorHandler[SettingsPatch]
    ) -> SettingsPatch:
        try:
            patch = handler(data)
        except ValidationError as exc:
            sentence = (
                _refusal(data, exc)
                if isinstance(data, dict)
                else "Input should be a valid dictionary"  # pydantic's words for a non-object
            )
        else:
            if patch.max_sample_gap_from is None or patch.max_sample_gap_seconds is not None:
                return patch
            sentence = "maxSampleGapFrom goes with maxSampleGapSeconds: it dates that value."
        raise PydanticCustomError("invalid_setting", "{sentence}", {"sentence": sentence})

    def changes(self) -> dict[str, object]:
        """The plain settings sent, by attribute name (maxSampleGap is dated: not here)."""
        return self.model_dump(
            exclude_unset=True, exclude={"max_sample_gap_seconds", "max_sample_gap_from"}
        )

    def audited(self) -> dict[str, object]:
        """Every setting sent, by attribute name, as the audit log stores it (JSON)."""
        return self.model_dump(mode="json", exclude_unset=True)


def _refusal(sent: dict[str, Any], exc: ValidationError) -> str:
    errors = exc.errors()
    unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
    if unknown:
        return f"Unknown setting(s): {', '.join(unknown)}."
    # The first refused setting in the order sent is the one named.
    order = list(sent)
    key = min((str(e["loc"][0]) for e in errors), key=order.index)
    if key == "timezone":
        return f"timezone {sent[key]!r} is not an IANA time zone."
    if key == "maxSampleGapFrom":
        return (
            "maxSampleGapFrom must be a time with its zone offset from 1970 on, "
            "e.g. 2026-12-01T00:00:00Z."
        )
    field = next(f for f in SettingsPatch.model_fields.values() if f.alias == key)
    low = next(m.ge for m in field.metadata if isinstance(m, Ge))
    high = next(m.le for m in field.metadata if isinstance(m, Le))
    return f"{key} must be a whole number from {low} to {high}."


class Member(ReadModel):
    email: str
    role: str


class MemberList(ReadModel):
    members: list[Member]


class MemberRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: Annotated[str, Field(min_length=3, max_length=320)]
    role: Annotated[str, Field(max_length=20)]
    # Only a brand-new account gets it; an existing account's password is never changed.
    password: Annotated[str, Field(min_length=8, max_length=1024)] | None = None


class AddedMember(ReadModel):
    """A member just added (or re-added), with their new personal API token (shown once)."""

    email: str
    workspace: str
    role: str
    api_token: Annotated[str, Field(repr=False)]
    # The email already had an account (here or in another workspace): it only gained
    # this membership; its password and everything else about it are unchanged.
    existing_account: bool


class ApiTokenOut(ReadModel):
    """A personal API token as its owner sees it listed: the public prefix, never the secret."""

    token_prefix: str
    created_at: IsoTime
    revoked_at: IsoTime | None
    name: str | None = None
    expires_at: IsoTime | None = None


class MyApiTokens(ReadModel):
    workspace: str
    api_tokens: list[ApiTokenOut]


class IssueApiTokenRequest(BaseModel):
    """`POST /api/v1/me/api-tokens`: both optional; no expiry means until revoked."""

    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", frozen=True)

    name: Annotated[str | None, Field(min_length=1, max_length=100, pattern=NO_CONTROL)] = None
    expires_in_days: Annotated[int | None, Field(ge=1, le=3650, strict=True)] = None


class IssuedApiToken(ReadModel):
    api_token: Annotated[str, Field(repr=False)]
    token_prefix: str
    workspace: str
    role: str
    name: str | None = None
    expires_at: IsoTime | None = None


class MembershipTokens(ReadModel):
    """One workspace of the account page: the person's role there and their tokens."""

    slug: str
    name: str
    role: str
    tokens: list[ApiTokenOut]
