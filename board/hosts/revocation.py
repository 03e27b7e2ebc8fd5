"""How a revoke reaches every board process's agent-access cache (`board/ingest/access.py`).

The revoke (`service.revoke_host`) sends `REVOKE_CHANNEL` a notice inside its own
transaction, so PostgreSQL delivers it to every listening process when (and only if) it
commits; the revoking process is told directly. The format lives here, with the revoke,
so that the agent side reads hosts and hosts never reads the agent side.
"""

from __future__ import annotations

from typing import Annotated, Protocol

from fastapi import Depends
from starlette.requests import HTTPConnection

REVOKE_CHANNEL = "gua_revoke"

HostKey = tuple[int, int]  # (workspace_id, host_id)


class RevocationListener(Protocol):
    """This process's agent access (the runtime): it forgets a revoked host at once."""

    def announce_revocation(self, workspace_id: int, host_id: int) -> None: ...


def revocation_payload(workspace_id: int, host_id: int) -> str:
    return f"{workspace_id}:{host_id}"


def parse_revocation(payload: str) -> HostKey | None:
    workspace, _, host = payload.partition(":")
    if not (workspace.isdigit() and host.isdigit()):
        return None
    return (int(workspace), int(host))


async def revocation_listener(connection: HTTPConnection) -> RevocationListener:
    """This process's listener: the runtime on app.state (built by the composition root)."""
    listener: RevocationListener = connection.app.state.runtime
    return listener


RevocationListenerDep = Annotated[RevocationListener, Depends(revocation_listener)]
