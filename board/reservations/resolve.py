"""What a booking request names, checked: the member, the host, its GPUs, the overlap.

Each refusal is one sentence (a 4xx's detail) and happens before anything is written.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg

from board.auth.deps import WorkspaceContext
from board.errors import Conflict, Forbidden, Unprocessable
from board.rollups.crediting import UNKNOWN_USER


class UnknownHost(Unprocessable):
    """The booking names no host of this workspace (a page asks to pick one)."""


class UnknownGpu(Unprocessable):
    """The booking names a GPU the host never reported, or one twice."""


class Overlap(Conflict):
    """Another booking holds some of these GPUs for part of the time.

    The API's sentence names it by id and UTC times; the attributes let a page name the
    GPUs, the member and the local times instead.
    """

    def __init__(
        self,
        email: str,
        start: datetime,
        end: datetime,
        public: str,
        host_id: str,
        gpu_uuids: list[str],
    ) -> None:
        super().__init__(
            f"Those GPUs are already booked by {email} from {start.astimezone(UTC).isoformat()} "
            f"to {end.astimezone(UTC).isoformat()} (reservation {public}).",
            reservationId=public,
        )
        self.email = email
        self.start = start
        self.end = end
        self.host_id = host_id  # public id
        self.gpu_uuids = gpu_uuids


async def member(
    conn: psycopg.AsyncConnection[Any], ctx: WorkspaceContext, email: str | None
) -> tuple[int, str]:
    """The reserver: the caller, or (admins only) another member of the workspace."""
    if email is None or email.strip().lower() == ctx.email:
        return ctx.user_id, ctx.email
    if ctx.role != "admin":
        raise Forbidden("Only an admin may book for another member.")
    cur = await conn.execute(
        "SELECT u.id, u.email FROM memberships m JOIN users u ON u.id = m.user_id "
        "WHERE m.workspace_id = %s AND u.email = %s",
        [ctx.workspace_id, email.strip().lower()],
    )
    row = await cur.fetchone()
    if row is None:
        raise Unprocessable(f"{email!r} is not a member of this workspace.")
    return int(row[0]), str(row[1])


async def hold_member(conn: psycopg.AsyncConnection[Any], workspace_id: int, user_id: int) -> None:
    """Keep the reserver's membership until the booking commits (FOR SHARE: a removal
    waits); one removed while the booking waited for its host's lock is a 409."""
    cur = await conn.execute(
        "SELECT 1 FROM memberships WHERE workspace_id = %s AND user_id = %s FOR SHARE",
        [workspace_id, user_id],
    )
    if await cur.fetchone() is None:
        raise Conflict("That member was removed from this workspace meanwhile.")


async def host(conn: psycopg.AsyncConnection[Any], workspace_id: int, host: str) -> int:
    try:
        public_id = uuid.UUID(host)
    except ValueError:
        raise UnknownHost(f"hostId {host!r} is not a host of this workspace.") from None
    cur = await conn.execute(
        "SELECT id, revoked_at IS NOT NULL FROM hosts WHERE workspace_id = %s AND public_id = %s",
        [workspace_id, public_id],
    )
    row = await cur.fetchone()
    if row is None:
        raise UnknownHost(f"hostId {host!r} is not a host of this workspace.")
    if row[1]:
        raise Unprocessable("That host is revoked; it cannot be booked.")
    return int(row[0])


async def refuse_revoked(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, host_id: int
) -> None:
    """A booking of a revoked host may shrink or end, never grow: growing books it anew."""
    cur = await conn.execute(
        "SELECT revoked_at IS NOT NULL FROM hosts WHERE workspace_id = %s AND id = %s",
        [workspace_id, host_id],
    )
    row = await cur.fetchone()
    if row is not None and row[0]:
        raise Unprocessable(
            "That host is revoked; its bookings can only be shortened or cancelled."
        )


async def gpus(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, host_id: int, wanted: list[str] | None
) -> list[int]:
    cur = await conn.execute(
        "SELECT uuid, id FROM gpus WHERE workspace_id = %s AND host_id = %s "
        "ORDER BY gpu_index, uuid",
        [workspace_id, host_id],
    )
    known = {str(u): int(i) for u, i in await cur.fetchall()}
    if wanted is None:
        if not known:
            raise Unprocessable("This host has reported no GPUs yet; there is nothing to book.")
        return sorted(known.values())
    if len(set(wanted)) != len(wanted):
        raise UnknownGpu("gpuUuids names a GPU twice.")
    unknown = [u for u in wanted if u not in known]
    if unknown:
        raise UnknownGpu(f"GPU {unknown[0]!r} is not a GPU of this host.")
    return sorted(known[u] for u in wanted)


def linux_users(wanted: list[str]) -> list[str]:
    """The accounts a booking names, each once; never the placeholder `unknown`."""
    if UNKNOWN_USER in wanted:
        # A card held with no process named is billed to it: as the reserver's own
        # account it would count as their use (used, not conflict).
        raise Unprocessable(
            f"linuxUsers names {UNKNOWN_USER!r}, the board's placeholder for a held card "
            "that names no process; it is nobody's account."
        )
    return sorted(set(wanted))


async def linked_users(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, user_id: int
) -> list[str]:
    cur = await conn.execute(
        "SELECT linux_user FROM directory_entries WHERE workspace_id = %s AND user_id = %s "
        "AND linux_user <> %s ORDER BY linux_user",
        [workspace_id, user_id, UNKNOWN_USER],
    )
    return [str(r[0]) for r in await cur.fetchall()]


async def refuse_overlap(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    gpu_ids: list[int],
    start: datetime,
    end: datetime,
    other_than: int | None = None,
) -> None:
    """409 naming the booking in the way (the host is locked: nothing can slip in)."""
    cur = await conn.execute(
        """
        SELECT r.public_id, u.email, lower(r.during), upper(r.during), h.public_id,
               array_agg(g.uuid ORDER BY g.gpu_index, g.uuid)
        FROM reservation_gpus rg
        JOIN reservations r ON r.workspace_id = rg.workspace_id AND r.id = rg.reservation_id
        JOIN users u ON u.id = r.user_id
        JOIN hosts h ON h.workspace_id = r.workspace_id AND h.id = r.host_id
        JOIN gpus g ON g.workspace_id = rg.workspace_id AND g.id = rg.gpu_id
        WHERE rg.workspace_id = %s AND rg.gpu_id = ANY(%s) AND rg.during && tstzrange(%s, %s)
          AND r.id IS DISTINCT FROM %s
        GROUP BY r.id, r.public_id, u.email, r.during, h.public_id
        ORDER BY lower(r.during) LIMIT 1
        """,
        [workspace_id, gpu_ids, start, end, other_than],
    )
    row = await cur.fetchone()
    if row is not None:
        public, email, lo, hi, host, uuids = row
        raise Overlap(str(email), lo, hi, str(public), str(host), [str(u) for u in uuids])


async def write_gpus(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    stored_id: int,
    host_id: int,
    gpu_ids: list[int],
    start: datetime,
    end: datetime,
) -> None:
    try:
        async with conn.transaction():  # a savepoint: a lost race becomes a 409, not a 500
            await conn.execute(
                "INSERT INTO reservation_gpus (workspace_id, reservation_id, gpu_id, host_id, "
                "during) SELECT %s, %s, g, %s, tstzrange(%s, %s) FROM unnest(%s::bigint[]) g",
                [workspace_id, stored_id, host_id, start, end, gpu_ids],
            )
    except psycopg.errors.ExclusionViolation:
        raise Conflict("Those GPUs are already booked for part of that time.") from None
