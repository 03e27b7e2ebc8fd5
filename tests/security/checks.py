"""What the security tests read back from the served board: counts in its database, what
a host has stored, the hosts API's view of a host, raw HTTP exchanges on a socket, and an
answer that is no crash.
"""

from __future__ import annotations

import socket
from typing import Any

from tests.security.conftest import db
from tests.security.seed import (
    Host,
    Tenant,
)
from tests.support.live import LiveBoard
from tests.support.replies import Reply


def stored(board: LiveBoard, host: Host) -> tuple[object, object, object]:
    """(observations, GPUs, archive objects) the board keeps for the host."""
    url = board.env["GUA_BOARD_DATABASE_URL"]
    where = (
        "FROM {} x JOIN hosts h ON h.workspace_id = x.workspace_id AND h.id = x.host_id "
        "WHERE h.public_id = %s::uuid"
    )
    return (
        db(url, "SELECT count(*) " + where.format("host_observations"), host.host_id),
        db(url, "SELECT count(*) " + where.format("gpus"), host.host_id),
        db(url, "SELECT count(*) " + where.format("archive_objects"), host.host_id),
    )


def host_view(board: LiveBoard, tenant: Tenant, host: Host) -> dict[str, Any]:
    with board.client(tenant.admin.token) as c:
        reply = board.call(c, "GET", f"/api/v1/workspaces/{tenant.slug}/hosts/{host.host_id}")
    assert reply.status_code == 200, reply
    view: dict[str, Any] = reply.json()
    return view


def not_a_crash(reply: Reply) -> None:
    """A 4xx (or a redirect) with a JSON string detail or an HTML page; never a 5xx."""
    assert reply.status_code < 500, reply
    assert "Internal Server Error" not in reply.text, reply
    if reply.status_code >= 400 and "json" in reply.headers.get("content-type", ""):
        reply.detail()


def count(board: LiveBoard, sql: str, *args: object) -> int:
    value = db(board.env["GUA_BOARD_DATABASE_URL"], sql, *args)
    assert isinstance(value, int), value
    return value


def raw_exchange(board: LiveBoard, request: bytes, *, half_close: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", board.port), timeout=60) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return answer


def statuses_in(answer: bytes) -> list[bytes]:
    return [line.split(b" ", 2)[1] for line in answer.split(b"\r\n") if line.startswith(b"HTTP/1.")]
