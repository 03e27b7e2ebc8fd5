"""The agent side's long-lived parts of this process, for routes of any domain.

Built by the composition root (board.runtime) and read from `app.state.runtime` by
attribute, so no domain imports the runtime.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from board.auth.deps import AGENT_TOKEN as AGENT_TOKEN
from board.auth.deps import AgentTokenHeader as AgentTokenHeader
from board.ingest.access import AgentAccess


async def agent_access(connection: HTTPConnection) -> AgentAccess:
    """Token -> host, not revoked: the one agent-access seam (board/ingest/access.py)."""
    access: AgentAccess = connection.app.state.runtime.access
    return access


AccessDep = Annotated[AgentAccess, Depends(agent_access)]
