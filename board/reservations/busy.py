"""Who is on the GPUs being booked, right now: the warning before booking a busy GPU.

A booking that starts soon on a GPU someone else is using (or holding idle) will find
them there; the API answers such a booking with `warnings`, the page asks to confirm.
Read from the host's newest tick (`hosts.latest_tick`), under the host lock the booking
holds, so it is what the booking's own figures will first see.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

import psycopg

from board.reservations.schemas import BusyGpu
from board.rollups.crediting import UNKNOWN_USER, billed_users

# A booking that starts within this much of now is warned about.
BUSY_AHEAD = timedelta(hours=1)
STATES = {"active": "in use", "idle_held": "idle-held"}


def _who(users: list[str], emails: dict[str, str]) -> str:
    named = [
        "a process the host could not name"
        if user == UNKNOWN_USER
        else f"{user} ({emails[user]})"
        if user in emails
        else user
        for user in users
    ]
    return ", ".join(named)


async def busy_gpus(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_id: int,
    gpu_ids: Collection[int],
    linux_users: Collection[str],
    stale_after_seconds: int,
    now: datetime,
) -> list[BusyGpu]:
    """The booked GPUs held now by someone not among the booking's `linux_users`.

    A stale host says nothing about now (its GPUs are not observed): no warning."""
    cur = await conn.execute(
        "SELECT latest_observed_at, latest_tick FROM hosts WHERE workspace_id = %s AND id = %s",
        [workspace_id, host_id],
    )
    row = await cur.fetchone()
    if row is None or row[0] is None or row[1] is None:
        return []
    if now - row[0] > timedelta(seconds=stale_after_seconds):  # hosts.freshness's "stale"
        return []
    wanted, mine = set(gpu_ids), set(linux_users)
    held: list[tuple[int, str, list[str]]] = []
    for gpu_id, state, _util, _used, _total, holders, *_since in json.loads(row[1]):
        others = [u for u in billed_users(state, tuple(holders)) if u not in mine]
        if gpu_id in wanted and state in STATES and others:
            held.append((int(gpu_id), str(state), sorted(others)))
    if not held:
        return []
    cur = await conn.execute(
        "SELECT id, uuid, gpu_index FROM gpus WHERE workspace_id = %s AND id = ANY(%s)",
        [workspace_id, [g for g, _, _ in held]],
    )
    devices = {int(i): (str(u), int(x)) for i, u, x in await cur.fetchall()}
    cur = await conn.execute(
        "SELECT d.linux_user, u.email FROM directory_entries d JOIN users u ON u.id = d.user_id "
        "WHERE d.workspace_id = %s AND d.linux_user = ANY(%s)",
        [workspace_id, sorted({u for _, _, users in held for u in users})],
    )
    emails = {str(user): str(email) for user, email in await cur.fetchall()}
    found = []
    for gpu_id, state, users in held:
        uuid, index = devices[gpu_id]
        found.append(
            BusyGpu(
                gpu_uuid=uuid,
                gpu_index=index,
                state="active" if state == "active" else "idle_held",
                linux_users=users,
                member_emails=sorted({emails[u] for u in users if u in emails}),
                detail=f"GPU {index} is {STATES[state]} now by {_who(users, emails)}.",
            )
        )
    return sorted(found, key=lambda b: (b.gpu_index, b.gpu_uuid))
