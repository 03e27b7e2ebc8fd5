"""How booked time was spent (accounting.md, "Reservations"), in one place.

A `ReservationDelta` is a target of the one crediting rule (board.rollups.crediting:
which intervals count, judged by which maxSampleGap, cut at which hours, taken back how
when a late point splits one), and an `AllocationDelta` (board.rollups.allocated: the
clipping and the slots, shared with scheduler jobs); it says only where a piece of a
reserved GPU's time goes. The ingest path (each new interval, and the re-split of one
an out-of-order point lands in), a change of a booking (credit the difference) and the
rebuild from raw samples all credit through it, so they cannot disagree. Like the
hourly rollups, every figure is integer microseconds, so un-crediting is the exact
inverse of crediting and the figures do not depend on the order in which observations
or bookings arrive.

For each reserved GPU, each observed interval piece inside a booking (intervals are cut
at the booking's start and end, and at hour boundaries) is exactly one of:
used (a process of the booking's Linux users on an `active` card), idleHeld (one of
theirs on a card that is not `active`), conflict (only someone else's), unused (none).
"Someone else" includes `unknown`: a held card naming no compute process is billed to
`unknown` by the hourly rollups, and is not idle either.

Where a piece is kept depends only on its booking and its UTC hour: an hour wholly
inside the booking (start <= hour, hour + 1 h <= end) goes to the GPU-hour rollup row
(`booked_*`, board.rollups.store), which ingest upserts for that GPU and hour anyway;
bookings of one GPU never overlap, so that hour belongs to this booking alone. A
booking's partial first and last hours go to reservation_hour_figures. Crediting and
un-crediting route alike, so they stay exact inverses in either place.
"""

from __future__ import annotations

from dataclasses import dataclass

from board.rollups.allocated import (
    COVERED,
    MINE_ACTIVE,
    MINE_IDLE,
    OTHERS,
    UNUSED,
    AllocationDelta,
    classify,
)
from board.rollups.crediting import HOUR_US

__all__ = [
    "CONFLICT",
    "COVERED",
    "FIGURE_COLUMNS",
    "IDLE_HELD",
    "UNUSED",
    "USED",
    "Booking",
    "ReservationDelta",
    "classify",
]

# The sums kept per booking, GPU and hour, in the order of a ReservationDelta row (the
# shared slots of board.rollups.allocated, under a reservation's names).
FIGURE_COLUMNS = ("covered_us", "used_us", "idle_held_us", "conflict_us", "unused_us")
USED, IDLE_HELD, CONFLICT = MINE_ACTIVE, MINE_IDLE, OTHERS


@dataclass(frozen=True, slots=True)
class Booking:
    """One GPU of a reservation, as the crediting needs it."""

    workspace_id: int
    reservation_id: int
    gpu_id: int
    start_us: int
    end_us: int
    linux_users: frozenset[str]


FigureKey = tuple[int, int, int]  # (reservation_id, gpu_id, hour start in µs)
BookedHourKey = tuple[int, int, int]  # (host_id, gpu_id, hour start in µs): a GPU-hour row


class ReservationDelta(AllocationDelta[Booking]):
    """Changes to the figures, summed before they are written: `figures` for a booking's
    partial first and last hours (reservation_hour_figures), `booked` for the hours wholly
    inside it (the GPU-hour rollup rows' booked_* sums)."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[FigureKey, list[int]] = {}
        self.booked: dict[BookedHourKey, list[int]] = {}
        self.workspace_of: dict[int, int] = {}  # reservation id -> workspace

    @property
    def bookings(self) -> dict[int, list[tuple[Booking, int]]]:
        return self.allocations

    def add_booking(self, booking: Booking, sign: int = 1) -> None:
        self.add_allocation(booking, sign)
        self.workspace_of[booking.reservation_id] = booking.workspace_id

    def row(
        self, allocation: Booking, allocation_sign: int, host_id: int, gpu_id: int, hour_us: int
    ) -> list[int]:
        """An hour wholly inside the booking: its GPU-hour row; a partial one: a figure row."""
        if allocation.start_us <= hour_us and hour_us + HOUR_US <= allocation.end_us:
            row = self.booked.get((host_id, gpu_id, hour_us))
            if row is None:
                row = self.booked[(host_id, gpu_id, hour_us)] = [0] * 5
            return row
        key = (allocation.reservation_id, gpu_id, hour_us)
        row = self.figures.get(key)
        if row is None:
            row = self.figures[key] = [0] * 5
        return row

    def keep_hours(self, start_us: int, end_us: int) -> None:
        """Only the hours in [start, end): the rest was replayed only to cut intervals."""
        self.figures = {k: v for k, v in self.figures.items() if start_us <= k[2] < end_us}
        self.booked = {k: v for k, v in self.booked.items() if start_us <= k[2] < end_us}
