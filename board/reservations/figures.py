"""Reading the figures back: a booking's hours live in two places.

board.reservations.crediting routes each hour of a booking: an hour wholly inside it
to the booked sums of the GPU-hour rollup row (gpu_hour_rollups.booked_*), a partial
first or last hour to reservation_hour_figures. Every reader takes both through
FIGURE_ROWS, which has one row per booking, GPU and hour, like the figures table had.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

# Parameters: ws, from, to (the UTC hours [from, to)). The whole hours of a booking are
# the GPU-hour rows between its ends, found by the rollups' primary key (workspace, GPU,
# hour) from each booked GPU overlapping the window.
FIGURE_ROWS = """
    SELECT f.reservation_id, f.gpu_id, f.hour_start, f.covered_us, f.used_us,
           f.idle_held_us, f.conflict_us, f.unused_us
    FROM reservation_hour_figures f
    WHERE f.workspace_id = %(ws)s AND f.hour_start >= %(from)s AND f.hour_start < %(to)s
    UNION ALL
    SELECT rg.reservation_id, g.gpu_id, g.hour_start, g.booked_covered_us, g.booked_used_us,
           g.booked_idle_held_us, g.booked_conflict_us, g.booked_unused_us
    FROM reservation_gpus rg
    JOIN gpu_hour_rollups g
      ON g.workspace_id = rg.workspace_id AND g.gpu_id = rg.gpu_id
     AND g.hour_start >= greatest(lower(rg.during), %(from)s)
     AND g.hour_start < %(to)s
     AND g.hour_start + interval '1 hour' <= upper(rg.during)
    WHERE rg.workspace_id = %(ws)s AND rg.during && tstzrange(%(from)s, %(to)s)
"""


async def figure_rows(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, from_: datetime, to: datetime
) -> list[tuple[Any, ...]]:
    """(reservation_id, gpu_id, hour_start, covered, used, idle_held, conflict, unused) of
    every booked GPU hour in [from_, to), in that key order."""
    cur = await conn.execute(
        f"SELECT * FROM ({FIGURE_ROWS}) AS figures ORDER BY 1, 2, 3",
        {"ws": workspace_id, "from": from_, "to": to},
    )
    return await cur.fetchall()
