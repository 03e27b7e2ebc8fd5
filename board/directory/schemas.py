"""The directory as the API shows it (board-api.md: entries of Linux users)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints
from pydantic.alias_generators import to_camel

from board.errors import NO_CONTROL_OR_BIDI, NO_NUL, explained_pattern
from board.readmodels import IsoTime, ReadModel

# A POSIX-ish account name, as `ps` shows it (the bookings' linuxUsers too).
LINUX_USER_PATTERN = explained_pattern(
    r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,62}\$?$",
    "is not a valid Linux user name: letters, digits, '_', '.' or '-' (not first), "
    "at most 63 of them, and maybe a final '$'",
)
Team = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        min_length=1,
        max_length=100,
        # No control characters, and no bidirectional overrides or isolates, which make a
        # name read as another on the pages (Trojan Source, CVE-2021-42574).
        pattern=NO_CONTROL_OR_BIDI,
    ),
]
Email = Annotated[str, StringConstraints(min_length=3, max_length=320, pattern=NO_NUL)]


class DirectoryEntryOut(ReadModel):
    linux_user: str
    member_email: str | None
    team: str | None
    # From the hourly per-user rollups: the first and the last hour it held a GPU.
    first_seen_at: IsoTime | None
    last_seen_at: IsoTime | None


class TeamOut(ReadModel):
    """A team: named by entries (`linuxUsers` of them) or by its own row, with the
    address its budget notices go to."""

    team: str
    contact_email: str | None
    linux_users: int


class DirectoryOut(ReadModel):
    entries: list[DirectoryEntryOut]
    teams: list[TeamOut]
    # Scheduler accounts and their teams (AccountTeamOut, below).
    accounts: list[AccountTeamOut]


class DirectoryEntryIn(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, extra="forbid")

    member_email: Email | None
    team: Team | None


class TeamIn(BaseModel):
    """`PUT …/directory/teams/{team}`: who is told about the team (null: nobody)."""

    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, extra="forbid")

    contact_email: Email | None


# A scheduler's account as a job record names it (Slurm's are short words).
Account = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True, min_length=1, max_length=64, pattern=NO_CONTROL_OR_BIDI
    ),
]


class AccountTeamOut(ReadModel):
    """A scheduler's (Slurm's) account and the team its jobs count for."""

    account: str
    team: str


class AccountTeamIn(BaseModel):
    """`PUT …/directory/accounts/{account}`: the account's team (null: none)."""

    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, extra="forbid")

    team: Team | None
