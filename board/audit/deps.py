"""Where a request came from, for the audit log."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection


def client_address(connection: HTTPConnection) -> str:
    """The client's address as the server resolved it.

    uvicorn rewrites it from X-Forwarded-For only when the peer is a trusted proxy
    (its forwarded_allow_ips setting, as for every other use of the address in the
    board), so a client cannot write a made-up address into the log.
    """
    return connection.client.host if connection.client else "unknown"


ClientAddressDep = Annotated[str, Depends(client_address)]
