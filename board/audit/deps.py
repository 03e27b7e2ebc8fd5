"""Where a request came from, for the audit log.

The resolver lives in the kit (board.auth.deps), since every request's WorkspaceContext
carries the address; it is named here too for the routes that record events of a person
rather than of a workspace context (sign-ins).
"""

from __future__ import annotations

from board.auth.deps import ClientAddressDep, client_address

__all__ = ["ClientAddressDep", "client_address"]
