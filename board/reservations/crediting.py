"""How booked time was spent (accounting.md, "Reservations"), in one place.

A `ReservationDelta` is a target of the one crediting rule (board.rollups.crediting:
which intervals count, judged by which maxSampleGap, cut at which hours, taken back how
when a late point splits one); it says only where a piece of a reserved GPU's time
goes. The ingest path (each new interval, and the re-split of one an out-of-order point
lands in), a change of a booking (credit the difference) and the rebuild from raw
samples all credit through it, so they cannot disagree. Like the hourly rollups, every
figure is integer microseconds, so un-crediting is the exact inverse of crediting and
the figures do not depend on the order in which observations or bookings arrive.

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

from collections.abc import Sequence
from dataclasses import dataclass, field

from board.rollups.crediting import HOUR_US, Tick, billed_users, credit_insertion
from board.rollups.gaps import GapSchedule

# The sums kept per booking, GPU and hour, in the order of a ReservationDelta row.
FIGURE_COLUMNS = ("covered_us", "used_us", "idle_held_us", "conflict_us", "unused_us")
COVERED, USED, IDLE_HELD, CONFLICT, UNUSED = range(len(FIGURE_COLUMNS))


@dataclass(frozen=True, slots=True)
class Booking:
    """One GPU of a reservation, as the crediting needs it."""

    workspace_id: int
    reservation_id: int
    gpu_id: int
    start_us: int
    end_us: int
    linux_users: frozenset[str]


def classify(state: str, holders: tuple[str, ...], linux_users: frozenset[str]) -> int:
    """The slot one interval piece of a reserved GPU counts in."""
    users = billed_users(state, holders)
    if not users:
        return UNUSED
    if linux_users.intersection(users):
        # The reserver's own process: working if the card is busy, else sitting held.
        return USED if state == "active" else IDLE_HELD
    return CONFLICT


FigureKey = tuple[int, int, int]  # (reservation_id, gpu_id, hour start in µs)
BookedHourKey = tuple[int, int, int]  # (host_id, gpu_id, hour start in µs): a GPU-hour row


@dataclass
class ReservationDelta:
    """Changes to the figures, summed before they are written: `figures` for a booking's
    partial first and last hours (reservation_hour_figures), `booked` for the hours wholly
    inside it (the GPU-hour rollup rows' booked_* sums)."""

    # The bookings in force, by GPU id, and the sign each is credited with (a change of
    # a booking un-credits its old range and credits its new one in one pass).
    bookings: dict[int, list[tuple[Booking, int]]] = field(default_factory=dict)
    figures: dict[FigureKey, list[int]] = field(default_factory=dict)
    booked: dict[BookedHourKey, list[int]] = field(default_factory=dict)
    workspace_of: dict[int, int] = field(default_factory=dict)  # reservation id -> workspace

    def add_booking(self, booking: Booking, sign: int = 1) -> None:
        self.bookings.setdefault(booking.gpu_id, []).append((booking, sign))
        self.workspace_of[booking.reservation_id] = booking.workspace_id

    def credit_piece(
        self, opener: Tick, hour_us: int, start_us: int, end_us: int, sign: int
    ) -> None:
        """Each reserved GPU's piece, clipped to each of its bookings, to its slot."""
        for g in opener.gpus:
            booked = self.bookings.get(g.gpu_id)
            if not booked:
                continue
            for booking, booking_sign in booked:
                lo = max(start_us, booking.start_us)
                hi = min(end_us, booking.end_us)
                if lo >= hi:
                    continue
                if booking.start_us <= hour_us and hour_us + HOUR_US <= booking.end_us:
                    row = self.booked.get((opener.host_id, g.gpu_id, hour_us))
                    if row is None:
                        row = self.booked[(opener.host_id, g.gpu_id, hour_us)] = [0] * 5
                else:
                    row = self.figures.get((booking.reservation_id, g.gpu_id, hour_us))
                    if row is None:
                        row = self.figures[(booking.reservation_id, g.gpu_id, hour_us)] = [0] * 5
                signed = sign * booking_sign * (hi - lo)
                row[COVERED] += signed
                row[classify(g.state, g.holders, booking.linux_users)] += signed

    def credit_insertion(
        self, before: Tick | None, new: Sequence[Tick], after_us: int | None, gaps: GapSchedule
    ) -> None:
        """New observations between two stored ones (board.rollups.crediting's
        `credit_insertion`); nothing to do for hosts with no booking around them."""
        if self.bookings:
            credit_insertion(self, before, new, after_us, gaps)

    def credit_series(self, ticks: Sequence[Tick], gaps: GapSchedule) -> None:
        """A stretch of a host's history in time order (booking changes, rebuilds)."""
        self.credit_insertion(None, ticks, None, gaps)

    def keep_hours(self, start_us: int, end_us: int) -> None:
        """Only the hours in [start, end): the rest was replayed only to cut intervals."""
        self.figures = {k: v for k, v in self.figures.items() if start_us <= k[2] < end_us}
        self.booked = {k: v for k, v in self.booked.items() if start_us <= k[2] < end_us}
