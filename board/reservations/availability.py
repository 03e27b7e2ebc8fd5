"""A GPU's availability now (accounting.md): its newest state against the booking in force.

The hosts API and the pages call `availability` per GPU and `bookings_in_force` once per
request, so the rule lives here only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import psycopg

from board.reservations.crediting import CONFLICT, USED, classify
from board.reservations.schemas import ReservationOut
from board.rollups.crediting import billed_users, compute_holders

Availability = Literal[
    "free", "in_use", "reserved_in_use", "reserved_idle", "reserved_conflict", "not_observed"
]


def availability(
    observed: bool,
    state: str | None,
    holders: tuple[str, ...],
    booking_users: frozenset[str] | None,
) -> Availability:
    """`observed`: the host is fresh and its newest observation lists this GPU.

    `booking_users`: the Linux users of the booking in force now, None when there is none.
    """
    if not observed or state is None:
        return "not_observed"
    if booking_users is None:
        return "in_use" if billed_users(state, holders) else "free"
    slot = classify(state, holders, booking_users)
    if slot == USED:
        return "reserved_in_use"
    if slot == CONFLICT:
        return "reserved_conflict"
    return "reserved_idle"


InForce = dict[tuple[int, str], ReservationOut]  # (host id, GPU uuid) -> booking in force


def gpu_availability(
    host_id: int,
    gpu_uuid: str,
    observed: bool,
    state: str | None,
    processes: Iterable[tuple[str, str | None]],
    in_force: InForce,
) -> tuple[Availability, ReservationOut | None]:
    """One GPU as the hosts API shows it: its availability and the booking in force.

    `processes`: (Linux user, type) of the processes on it in its newest observation.
    """
    booking = in_force.get((host_id, gpu_uuid))
    users = frozenset(booking.linux_users) if booking is not None else None
    return availability(observed, state, compute_holders(processes), users), booking


_IN_FORCE = """
    SELECT rg.host_id, g.uuid, r.public_id, h.public_id, u.email, r.linux_users,
           lower(r.during), upper(r.during), r.note
    FROM reservation_gpus rg
    JOIN gpus g ON g.workspace_id = rg.workspace_id AND g.id = rg.gpu_id
    JOIN reservations r ON r.workspace_id = rg.workspace_id AND r.id = rg.reservation_id
    JOIN hosts h ON h.workspace_id = r.workspace_id AND h.id = r.host_id
    JOIN users u ON u.id = r.user_id
    WHERE rg.workspace_id = %s AND rg.host_id = ANY(%s) AND rg.during @> %s::timestamptz
    ORDER BY g.gpu_index, g.uuid  -- a booking's GPUs in the order GET …/{id} lists them
"""


async def bookings_in_force(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_ids: Sequence[int],
    now: datetime | None = None,
) -> InForce:
    """(host id, GPU uuid) -> the booking in force now, for the given hosts (one query).

    Each booking is shown with all of its GPUs that are among these hosts, as the API
    lists it, so a page can say which GPUs were booked together.
    """
    cur = await conn.execute(_IN_FORCE, [workspace_id, list(host_ids), now or datetime.now(UTC)])
    rows = await cur.fetchall()
    by_reservation: dict[str, list[str]] = {}
    for _host, uuid, public, *_rest in rows:
        by_reservation.setdefault(str(public), []).append(str(uuid))
    out: InForce = {}
    for host_id, uuid, public, host, email, users, start, end, note in rows:
        out[(int(host_id), str(uuid))] = ReservationOut(
            reservation_id=str(public),
            host_id=str(host),
            gpu_uuids=by_reservation[str(public)],
            member_email=email,
            linux_users=list(users),
            start=start.astimezone(UTC),
            end=end.astimezone(UTC),
            note=note,
        )
    return out


_BOOKED_DURING = """
    SELECT DISTINCT gpu_id FROM reservation_gpus
    WHERE workspace_id = %s AND host_id = ANY(%s) AND upper(during) > %s
      AND during && tstzrange(%s, %s)
"""


async def booked_during(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_ids: Sequence[int],
    start: datetime,
    end: datetime,
) -> set[int]:
    """The GPU ids of these hosts with a booking overlapping [start, end) (one query, on
    the bookings-by-end index: those that ended before are never read)."""
    cur = await conn.execute(_BOOKED_DURING, [workspace_id, list(host_ids), start, start, end])
    return {int(gpu_id) for (gpu_id,) in await cur.fetchall()}


_USERS_IN_FORCE = """
    SELECT rg.host_id, g.uuid, r.linux_users
    FROM reservation_gpus rg
    JOIN gpus g ON g.workspace_id = rg.workspace_id AND g.id = rg.gpu_id
    JOIN reservations r ON r.workspace_id = rg.workspace_id AND r.id = rg.reservation_id
    WHERE rg.workspace_id = %s AND rg.host_id = ANY(%s) AND rg.during @> %s::timestamptz
"""


async def booking_users_in_force(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_ids: Sequence[int],
    now: datetime,
) -> dict[tuple[int, str], frozenset[str]]:
    """(host id, GPU uuid) -> the Linux users of the booking in force now: what
    `availability` needs, without the bookings' models (the capacity question reads
    every host's, and a model per booking was most of its time)."""
    cur = await conn.execute(_USERS_IN_FORCE, [workspace_id, list(host_ids), now])
    return {(int(h), str(u)): frozenset(users) for h, u, users in await cur.fetchall()}
