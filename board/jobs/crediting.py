"""How a job's GPU time is counted (accounting.md, "Scheduler jobs"; docs/jobs.md).

A `JobDelta` is a target of the one crediting rule (board.rollups.crediting) and an
`AllocationDelta` (board.rollups.allocated: clipping to each allocated GPU's range and
the four slots, the same code a reservation's figures use): each observed interval piece
of a job's GPU inside [startedAt, endedAt) (until the newest observation while it runs)
is active, idleHeld, foreign or unused, kept per (job, GPU, UTC hour) with the
utilization integral and the most memory in use.

Memory is a maximum, not a sum: crediting a piece raises it to the opener's memory in
use (GREATEST on upsert), un-crediting does not lower it. So after an end time moves
earlier, or a late observation re-cuts an interval at the job's edge, it may still hold
a sample that no longer opens a credited piece; `gua-board rollups rebuild` recomputes
it. Every other figure is integer µs and exact to un-credit.

Outside any job (`outside_job_hours`): on a host of `cluster_hosts`, from its `since`
on, each billed user's share of a held piece (the split of the user-hour rollups:
piece // number of users) less the part of it covered by an allocation of one of their
own jobs on that GPU. That is not a sum over allocations (two jobs of one user may
overlap), so it is credited against an `OutsideView` (every allocation in force on the
hosts, and their `since`) as a whole: a record change un-credits the old view and
credits the new one over the range where they differ.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from board.rollups.allocated import (
    COVERED,
    MINE_ACTIVE,
    MINE_IDLE,
    OPEN_END_US,
    OTHERS,
    UNUSED,
    AllocationDelta,
)
from board.rollups.crediting import HOUR_US, UNKNOWN_USER, GpuHourKey, GpuTick, Tick

# The sums kept per job, GPU and hour, in the order of a JobDelta row.
FIGURE_COLUMNS = (
    "covered_us",
    "active_us",
    "idle_held_us",
    "foreign_us",
    "unused_us",
    "util_pct_us",
    "max_memory_used_mb",
)
_UTIL, _MAX_MEMORY = 5, 6
_NOBODY_NAMED = (UNKNOWN_USER,)


def run_claims(job_pairs: tuple[tuple[str, str], ...], linux_user: str, raw_job_id: str) -> bool:
    """Whether a run's user's processes on a GPU whose processes name their jobs
    (`job_pairs`: (user, job), "" for none) may be the run's: one names its job or none."""
    return any(u == linux_user and job in ("", raw_job_id) for u, job in job_pairs)


@dataclass(frozen=True, slots=True)
class JobGpuRange:
    """One GPU of one job run, as the crediting needs it: [start, end) in µs (end
    OPEN_END_US while it runs), and the run's Linux user."""

    workspace_id: int
    job_id: int
    host_id: int
    gpu_id: int
    start_us: int
    end_us: int
    linux_user: str
    # The allocation's users as the shared classification reads them (made once: the
    # crediting asks for them on every piece).
    linux_users: frozenset[str]
    # Slurm's own id of the run's job, what a process's cgroup names (our agent's jobId).
    raw_job_id: str = ""

    @classmethod
    def of(
        cls,
        workspace_id: int,
        job_id: int,
        host_id: int,
        gpu_id: int,
        start_us: int,
        end_us: int | None,
        linux_user: str,
        raw_job_id: str = "",
    ) -> JobGpuRange:
        return cls(
            workspace_id,
            job_id,
            host_id,
            gpu_id,
            start_us,
            OPEN_END_US if end_us is None else end_us,
            linux_user,
            frozenset((linux_user,)),
            raw_job_id,
        )

    def claims(self, job_pairs: tuple[tuple[str, str], ...]) -> bool:
        """Whether its user's processes on a GPU may be this run's, from the jobs they
        name (GpuTick.job_pairs, never empty here): yes when one names this run's job or
        names none; no when every one names another job (another run of the same user
        sharing the GPU, or a job of theirs the scheduler placed elsewhere)."""
        return run_claims(job_pairs, self.linux_user, self.raw_job_id)


@dataclass
class OutsideView:
    """What held time outside jobs is judged against: the cluster hosts with their
    `since` (µs), and the ranges of every job on their GPUs by (GPU, Linux user), each
    list in start order."""

    since: dict[int, int] = field(default_factory=dict)  # host id -> since
    ranges: dict[tuple[int, str], list[tuple[int, int]]] = field(default_factory=dict)

    def add(self, job_gpu: JobGpuRange) -> None:
        key = (job_gpu.gpu_id, job_gpu.linux_user)
        # A new list, never one changed in place: it may be a kept copy's (board.jobs.batch).
        ranges = list(self.ranges.get(key, ()))
        bisect.insort(ranges, (job_gpu.start_us, job_gpu.end_us))
        self.ranges[key] = ranges

    def outside_us(self, gpu_id: int, user: str, lo: int, hi: int) -> int:
        """How much of [lo, hi) no job of `user` on the GPU covers (overlaps once)."""
        ranges = self.ranges.get((gpu_id, user))
        if not ranges:
            return hi - lo
        covered = 0
        cursor = lo
        for start, end in ranges:  # in start order
            start, end = max(start, cursor), min(end, hi)
            if start < end:
                covered += end - start
                cursor = end
        return hi - lo - covered


JobFigureKey = tuple[int, int, int]  # (job id, gpu id, hour start in µs)
OutsideKey = tuple[int, str, int]  # (gpu id, linux user, hour start in µs)


def rides_gpu_row(
    allocation: JobGpuRange,
    allocation_sign: int,
    allocated: list[tuple[JobGpuRange, int]],
    hour_us: int,
) -> bool:
    """Whether the run's hour is kept on the GPU-hour row: the hour lies wholly inside the
    run, and no other run of the same view (`allocated`: the GPU's runs, with the sign
    of the view each belongs to) touches it, so the row holds one run's figures alone."""
    hour_end = hour_us + HOUR_US
    if allocation.start_us > hour_us or allocation.end_us < hour_end:
        return False
    if len(allocated) == 1:
        return True
    job_id = allocation.job_id
    for other, other_sign in allocated:
        if (
            other_sign == allocation_sign
            and other.job_id != job_id
            and other.start_us < hour_end
            and other.end_us > hour_us
        ):
            return False
    return True


class JobDelta(AllocationDelta[JobGpuRange]):
    """Changes to job_hour_figures (`figures`), to the job sums of GPU-hour rows (`rides`,
    with the run each row holds in `riders`) and to outside_job_hours (`outside`), summed
    before they are written.

    Where a piece goes depends on its run, its UTC hour and the other runs of its GPU in
    the same view (`rides_gpu_row`): an hour wholly inside the run that no other run
    touches rides on the GPU-hour row, which ingest upserts for that GPU and hour anyway
    (as a booking's whole hours do); the rest, a figure row per run, GPU and hour.
    Crediting and un-crediting under one view route alike, so they stay exact inverses;
    a record change un-credits the host's old view and credits its new one over whole
    hours (board.jobs.recredit), which moves an hour between the two places when a run
    starts or stops sharing it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[JobFigureKey, list[int]] = {}
        self.rides: dict[GpuHourKey, list[int]] = {}
        # The run credited (with a positive sign) on each ride row: the row's job_id.
        self.riders: dict[GpuHourKey, int] = {}
        self.outside: dict[OutsideKey, list[int]] = {}
        self.views: list[tuple[OutsideView, int]] = []
        self.workspace_of_job: dict[int, int] = {}
        self.host_of_gpu: dict[int, int] = {}

    def add_job_gpu(self, job_gpu: JobGpuRange, sign: int = 1) -> None:
        self.add_allocation(job_gpu, sign)
        self.workspace_of_job[job_gpu.job_id] = job_gpu.workspace_id

    def add_view(self, view: OutsideView, sign: int = 1) -> None:
        """Judge held time outside jobs against `view` (with `sign`: -1 takes it back)."""
        if view.since:
            self.views.append((view, sign))

    def row(
        self,
        allocation: JobGpuRange,
        allocation_sign: int,
        host_id: int,
        gpu_id: int,
        hour_us: int,
    ) -> list[int]:
        if rides_gpu_row(allocation, allocation_sign, self.allocations[gpu_id], hour_us):
            ride_key = (host_id, gpu_id, hour_us)
            if allocation_sign > 0:
                self.riders[ride_key] = allocation.job_id
            ride = self.rides.get(ride_key)
            if ride is None:
                ride = self.rides[ride_key] = [0] * len(FIGURE_COLUMNS)
            return ride
        key = (allocation.job_id, gpu_id, hour_us)
        row = self.figures.get(key)
        if row is None:
            row = self.figures[key] = [0] * len(FIGURE_COLUMNS)
            self.host_of_gpu[gpu_id] = host_id
        return row

    def claims(self, allocation: JobGpuRange, job_pairs: tuple[tuple[str, str], ...]) -> bool:
        return allocation.claims(job_pairs)

    def add_more(self, row: list[int], gpu: GpuTick, signed_us: int) -> None:
        row[_UTIL] += gpu.util_pct * signed_us
        if signed_us > 0 and gpu.memory_used_mb > row[_MAX_MEMORY]:
            row[_MAX_MEMORY] = gpu.memory_used_mb

    def wants_pieces(self) -> bool:
        return bool(self.allocations or self.views)

    def credit_piece(
        self, opener: Tick, hour_us: int, start_us: int, end_us: int, sign: int
    ) -> None:
        """AllocationDelta.credit_piece with `row` and `add_more` inlined, and the time
        outside jobs, in one pass over the GPUs: ingest runs it for every observation of
        a cluster host (the generic form cost about twice as much, docs/benchmarks.md).
        Tests hold it equal to the generic classification."""
        allocations = self.allocations
        figures = self.figures
        rides = self.rides
        host = opener.host_id
        views = self.views
        hour_end = hour_us + HOUR_US
        for g in opener.gpus:
            gpu_id = g.gpu_id
            allocated = allocations.get(gpu_id)
            # billed_users(g.state, g.holders), inlined; idle time is nobody's.
            users = g.holders or (_NOBODY_NAMED if g.state != "idle" else ())
            if allocated:
                mine = MINE_ACTIVE if g.state == "active" else MINE_IDLE
                for allocation, allocation_sign in allocated:
                    lo = start_us if start_us > allocation.start_us else allocation.start_us
                    hi = end_us if end_us < allocation.end_us else allocation.end_us
                    if lo >= hi:
                        continue
                    # rides_gpu_row(), its usual answers inlined: one run, a partial hour.
                    if (
                        allocation.start_us <= hour_us
                        and allocation.end_us >= hour_end
                        and (
                            len(allocated) == 1
                            or rides_gpu_row(allocation, allocation_sign, allocated, hour_us)
                        )
                    ):
                        ride_key = (host, gpu_id, hour_us)
                        row = rides.get(ride_key)
                        if row is None:
                            row = rides[ride_key] = [0] * len(FIGURE_COLUMNS)
                        if allocation_sign > 0:
                            self.riders[ride_key] = allocation.job_id
                    else:
                        key = (allocation.job_id, gpu_id, hour_us)
                        row = figures.get(key)
                        if row is None:
                            row = figures[key] = [0] * len(FIGURE_COLUMNS)
                            self.host_of_gpu[gpu_id] = host
                    signed = sign * allocation_sign * (hi - lo)
                    row[COVERED] += signed
                    if not users:
                        row[UNUSED] += signed
                    elif allocation.linux_user not in users or (
                        g.job_pairs and not allocation.claims(g.job_pairs)
                    ):
                        row[OTHERS] += signed
                    else:
                        row[mine] += signed
                    row[_UTIL] += g.util_pct * signed
                    if signed > 0 and g.memory_used_mb > row[_MAX_MEMORY]:
                        row[_MAX_MEMORY] = g.memory_used_mb
            if not users:
                continue
            for view, view_sign in views:
                since = view.since.get(host)
                if since is None or end_us <= since:
                    continue
                lo = start_us if start_us > since else since
                for user in users:
                    share = view.outside_us(gpu_id, user, lo, end_us) // len(users)
                    if not share:
                        continue
                    okey = (gpu_id, user, hour_us)
                    orow = self.outside.get(okey)
                    if orow is None:
                        orow = self.outside[okey] = [0]
                        self.host_of_gpu[gpu_id] = host
                    orow[0] += sign * view_sign * share

    def keep_hours(self, start_us: int, end_us: int) -> None:
        """Only the hours in [start, end): the rest was replayed only to cut intervals."""
        self.figures = {k: v for k, v in self.figures.items() if start_us <= k[2] < end_us}
        self.rides = {k: v for k, v in self.rides.items() if start_us <= k[2] < end_us}
        self.riders = {k: v for k, v in self.riders.items() if start_us <= k[2] < end_us}
        self.outside = {k: v for k, v in self.outside.items() if start_us <= k[2] < end_us}

    def ride_rows(self) -> dict[GpuHourKey, tuple[int, ...]]:
        """The GPU-hour rows' job sums to add, as RIDE_COLUMNS (board.rollups.store): the
        run credited there (0: only un-credited, the row keeps the run it names), its
        sums. Rows whose changes cancel out are left out."""
        return {
            key: (self.riders.get(key, 0), *sums)
            for key, sums in sorted(self.rides.items())
            if any(sums)
        }
