"""The directory as the API shows it (board-api.md: entries of Linux users)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints
from pydantic.alias_generators import to_camel

from board.readmodels import IsoTime, ReadModel

# A POSIX-ish account name, as `ps` shows it.
LINUX_USER_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,62}\$?$"
Team = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        min_length=1,
        max_length=100,
        # No control characters, and no bidirectional overrides or isolates, which make a
        # name read as another on the pages (Trojan Source, CVE-2021-42574).
        pattern=r"^[^\x00-\x1f\x7f\u202a-\u202e\u2066-\u2069]*$",
    ),
]
Email = Annotated[str, StringConstraints(min_length=3, max_length=320, pattern=r"^[^\x00]*$")]


class DirectoryEntryOut(ReadModel):
    linux_user: str
    member_email: str | None
    team: str | None
    # From the hourly per-user rollups: the first and the last hour it held a GPU.
    first_seen_at: IsoTime | None
    last_seen_at: IsoTime | None


class DirectoryOut(ReadModel):
    entries: list[DirectoryEntryOut]


class DirectoryEntryIn(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, extra="forbid")

    member_email: Email | None
    team: Team | None
