"""The audit log as the API answers it and the admin page shows it."""

from __future__ import annotations

from pydantic import Field

from board.readmodels import IsoTime, ReadModel

DetailValue = str | int | float | bool | None


class AuditEventOut(ReadModel):
    id: int
    at: IsoTime
    actor_email: str | None
    action: str
    target: str | None
    detail: dict[str, DetailValue] = Field(default_factory=dict)
    client_address: str | None


class AuditLogPage(ReadModel):
    workspace: str
    events: list[AuditEventOut]
    # Pass as ?cursor= for the next (older) page; null on the last page.
    next_cursor: str | None
