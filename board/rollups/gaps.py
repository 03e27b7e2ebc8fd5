"""maxSampleGap as dated values: which limit judges an interval.

A workspace's maxSampleGap is a list of values, each in force from an instant until the
next one (the first from the beginning of time). An interval is judged by the value in
force at its *opening* observation, so live ingest, a late point, an archive back-fill
and a rebuild from raw all judge it alike, and a later change never re-judges what was
opened before it. Workspaces keep the list as two arrays (`sample_gap_from`, whose first
element is NULL, and `sample_gap_seconds`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from board.rollups.crediting import to_us

# What lock queries select to build a schedule (the workspace read as `w`).
SCHEDULE_COLUMNS = "w.sample_gap_from, w.sample_gap_seconds"
# The longest limit the workspace ever had, in SQL: how far an interval can reach.
WIDEST_SQL = "(SELECT max(s) FROM unnest(w.sample_gap_seconds) AS s)"


@dataclass(frozen=True, slots=True)
class GapSchedule:
    """The limits in µs: `limits_us[0]` before `starts_us[0]`, `limits_us[i + 1]` from
    `starts_us[i]` on (`starts_us` ascending, one shorter than `limits_us`)."""

    starts_us: tuple[int, ...]
    limits_us: tuple[int, ...]

    @classmethod
    def constant(cls, seconds: int) -> GapSchedule:
        return cls((), (seconds * 1_000_000,))

    @classmethod
    def from_columns(cls, froms: Sequence[datetime | None], seconds: Sequence[int]) -> GapSchedule:
        """From a workspace's two arrays (the first `from` is NULL: since the beginning)."""
        if not seconds or len(froms) != len(seconds):
            raise ValueError("a sample-gap history needs one `from` per value")
        starts = tuple(to_us(f) for f in froms[1:] if f is not None)
        if len(starts) != len(seconds) - 1:
            raise ValueError("only the first value of a sample-gap history has no `from`")
        return cls(starts, tuple(int(s) * 1_000_000 for s in seconds))

    def at(self, opened_us: int) -> int:
        """The limit judging an interval opened at `opened_us`."""
        if not self.starts_us:  # the usual case, on the ingest path's hottest loop
            return self.limits_us[0]
        return self.limits_us[bisect_right(self.starts_us, opened_us)]

    @property
    def widest_us(self) -> int:
        """How far any interval can reach: windows around a change are widened by it."""
        return max(self.limits_us)

    @property
    def current_seconds(self) -> int:
        return self.limits_us[-1] // 1_000_000


async def load_schedule(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> GapSchedule:
    """The workspace's schedule, read by a statement of its own.

    Call it once the hosts it judges are locked: a statement that waited for a host lock
    still reads the workspace row as of its start, so a change committed while it waited
    would be missed by a lock query that joins the workspace.
    """
    cur = await conn.execute(
        f"SELECT {SCHEDULE_COLUMNS} FROM workspaces w WHERE w.id = %s", [workspace_id]
    )
    row = await cur.fetchone()
    if row is None:
        raise LookupError(f"no workspace {workspace_id}")
    return GapSchedule.from_columns(row[0], row[1])
