"""The agent side's long-lived parts of this process, for routes of any domain.

Built by the composition root (board.runtime) and read from `app.state.runtime` by
attribute, so no domain imports the runtime.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from board.auth.deps import BearerHeader
from board.ingest.access import AgentAccess

# An agent's own token (gua_agent_…), which enrollment gave its host.
AGENT_TOKEN = BearerHeader(
    "agentToken",
    "gua_agent",
    "A host's agent token (`gua_agent_…`), sent as `Authorization: Bearer gua_agent_…`; "
    "`POST /agent/v1/enrollments/claim` trades an enrollment token for it.",
)
AgentTokenHeader = Annotated[str | None, Depends(AGENT_TOKEN)]


async def agent_access(connection: HTTPConnection) -> AgentAccess:
    """Token -> host, not revoked: the one agent-access seam (board/ingest/access.py)."""
    access: AgentAccess = connection.app.state.runtime.access
    return access


AccessDep = Annotated[AgentAccess, Depends(agent_access)]
