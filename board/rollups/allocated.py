"""Time of GPUs given to someone: the one rule a reservation and a scheduler's job share.

A booking (board.reservations) and a job's allocation (board.jobs) are both an
`Allocation`: one GPU, a range [start, end), and the Linux users it is for. Each observed
interval piece of such a GPU inside its range (cut at the range's ends by clipping, and
at hours by the crediting rule, board.rollups.crediting) counts in exactly one slot:

- MINE_ACTIVE: a compute process of its users on an `active` card;
- MINE_IDLE: one of theirs on a card that is not `active` (held, doing nothing);
- OTHERS: only someone else's (`unknown`, a held card naming no process, is someone else);
  for a job, also its user's processes when every one of them names another job (our
  agent reads each process's job from its cgroup: `claims`);
- UNUSED: no compute process at all.

`AllocationDelta` holds the allocations in force by GPU, each with a sign (a change
un-credits its old range and credits its new one in one pass), clips each piece to them
and classifies it; a subclass says only where the sums go (`row`) and what else a piece
adds to them (`add_more`). All sums are integer µs, so crediting and un-crediting are
exact inverses and the figures do not depend on arrival order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from board.rollups.crediting import UNKNOWN_USER, GpuTick, Tick, billed_users, credit_insertion

if TYPE_CHECKING:
    from board.rollups.gaps import GapSchedule

# The first five sums of every allocation row, in this order.
SLOT_COLUMNS = ("covered_us", "mine_active_us", "mine_idle_us", "others_us", "unused_us")
COVERED, MINE_ACTIVE, MINE_IDLE, OTHERS, UNUSED = range(len(SLOT_COLUMNS))
# A range still open (a running job): past any observation.
OPEN_END_US = 2**62
_NOBODY_NAMED = (UNKNOWN_USER,)


class Allocation(Protocol):
    """What the crediting needs of a booking or a job's GPU."""

    @property
    def gpu_id(self) -> int: ...
    @property
    def start_us(self) -> int: ...
    @property
    def end_us(self) -> int: ...
    @property
    def linux_users(self) -> frozenset[str]: ...


A = TypeVar("A", bound=Allocation)


def classify(state: str, holders: tuple[str, ...], linux_users: frozenset[str]) -> int:
    """The slot one interval piece of an allocated GPU counts in."""
    users = billed_users(state, holders)
    if not users:
        return UNUSED
    if linux_users.intersection(users):
        # Its own users' process: working if the card is busy, else sitting held.
        return MINE_ACTIVE if state == "active" else MINE_IDLE
    return OTHERS


class AllocationDelta(ABC, Generic[A]):
    """Changes to an allocation's figures, summed before they are written."""

    def __init__(self) -> None:
        # The allocations in force, by GPU id, and the sign each is credited with.
        self.allocations: dict[int, list[tuple[A, int]]] = {}

    def add_allocation(self, allocation: A, sign: int = 1) -> None:
        # A new list, never an append: a delta may share its lists with a kept copy
        # (board.jobs.batch).
        gpu = allocation.gpu_id
        self.allocations[gpu] = [*self.allocations.get(gpu, ()), (allocation, sign)]

    @abstractmethod
    def row(
        self, allocation: A, allocation_sign: int, host_id: int, gpu_id: int, hour_us: int
    ) -> list[int]:
        """The sums a piece of `allocation` (credited with `allocation_sign`: a change
        takes an old view back with -1) in the hour goes to (SLOT_COLUMNS first)."""

    def add_more(self, row: list[int], gpu: GpuTick, signed_us: int) -> None:
        """Anything else a piece adds besides its slot (nothing, unless overridden)."""

    def claims(self, allocation: A, job_pairs: tuple[tuple[str, str], ...]) -> bool:
        """Whether its users' processes on a GPU whose processes name their jobs
        (`job_pairs`) may be this allocation's; a booking names no job: always."""
        return True

    def credit_piece(
        self, opener: Tick, hour_us: int, start_us: int, end_us: int, sign: int
    ) -> None:
        """Each allocated GPU's piece, clipped to each of its allocations, to its slot."""
        allocations = self.allocations
        for g in opener.gpus:
            allocated = allocations.get(g.gpu_id)
            if not allocated:
                continue
            # classify(), inlined (the ingest path runs this per GPU and interval piece):
            # billed_users(state, holders), then the slot of each allocation's users.
            users = g.holders or (_NOBODY_NAMED if g.state != "idle" else ())
            mine = MINE_ACTIVE if g.state == "active" else MINE_IDLE
            for allocation, allocation_sign in allocated:
                lo = start_us if start_us > allocation.start_us else allocation.start_us
                hi = end_us if end_us < allocation.end_us else allocation.end_us
                if lo >= hi:
                    continue
                row = self.row(allocation, allocation_sign, opener.host_id, g.gpu_id, hour_us)
                signed = sign * allocation_sign * (hi - lo)
                row[COVERED] += signed
                if not users:
                    row[UNUSED] += signed
                elif allocation.linux_users.isdisjoint(users) or (
                    g.job_pairs and not self.claims(allocation, g.job_pairs)
                ):
                    row[OTHERS] += signed
                else:
                    row[mine] += signed
                self.add_more(row, g, signed)

    def wants_pieces(self) -> bool:
        """Whether any piece may count (else the replay is skipped)."""
        return bool(self.allocations)

    def credit_insertion(
        self, before: Tick | None, new: Sequence[Tick], after_us: int | None, gaps: GapSchedule
    ) -> None:
        """New observations between two stored ones (board.rollups.crediting's
        `credit_insertion`); nothing to do for hosts with nothing allocated around them."""
        if self.wants_pieces():
            credit_insertion(self, before, new, after_us, gaps)

    def credit_series(self, ticks: Sequence[Tick], gaps: GapSchedule) -> None:
        """A stretch of a host's history in time order (allocation changes, rebuilds)."""
        self.credit_insertion(None, ticks, None, gaps)
