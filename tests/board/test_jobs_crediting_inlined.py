"""JobDelta.credit_piece is the shared allocation rule (board.rollups.allocated) with its
row lookup inlined, plus the time outside jobs: on any pieces, allocations (signed,
overlapping, one user's runs sharing a GPU) and processes naming jobs, it gives exactly
what the generic form gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from board.jobs.crediting import JobDelta, JobGpuRange, OutsideView
from board.rollups.allocated import AllocationDelta
from board.rollups.crediting import GpuTick, Tick, named_jobs

HOUR = 3_600_000_000


class GenericJobDelta(JobDelta):
    """The generic rule, then the outside time as a separate pass (the form before)."""

    def credit_piece(
        self, opener: Tick, hour_us: int, start_us: int, end_us: int, sign: int
    ) -> None:
        AllocationDelta.credit_piece(self, opener, hour_us, start_us, end_us, sign)
        for view, view_sign in self.views:
            since = view.since.get(opener.host_id)
            if since is None or end_us <= since:
                continue
            lo = max(start_us, since)
            for g in opener.gpus:
                users = g.holders or (("unknown",) if g.state != "idle" else ())
                for user in users:
                    share = view.outside_us(g.gpu_id, user, lo, end_us) // len(users)
                    if share:
                        row = self.outside.setdefault((g.gpu_id, user, hour_us), [0])
                        self.host_of_gpu[g.gpu_id] = opener.host_id
                        row[0] += sign * view_sign * share


_users = st.sampled_from(["alice", "bob"])
_process = st.tuples(
    _users, st.sampled_from(["compute", "graphics"]), st.sampled_from([None, "1", "2"])
)
_gpu = st.tuples(
    st.sampled_from(["active", "idle_held", "idle"]),
    st.integers(0, 100),
    st.integers(0, 5000),
    st.lists(_process, max_size=3),
)
# In minutes from the piece's hour: a range may cover the whole hour (its piece then goes
# to the GPU-hour row when no other range of the same sign touches the hour).
_range = st.tuples(
    st.integers(0, 1),
    st.sampled_from(["1", "2"]),
    _users,
    st.integers(-30, 59),
    st.integers(1, 120),
)


@settings(max_examples=300, deadline=None)
@given(
    gpus=st.lists(_gpu, min_size=1, max_size=2),
    ranges=st.lists(st.tuples(_range, st.sampled_from([1, -1])), max_size=4),
    piece=st.tuples(st.integers(0, 50), st.integers(1, 10)),
    since=st.sampled_from([None, 0, 30]),
)
def test_the_inlined_piece_equals_the_generic_rule(gpus, ranges, piece, since) -> None:
    s = 60_000_000
    ticks = []
    for gpu_id, (state, util, memory, processes) in enumerate(gpus):
        holders = tuple(sorted({u for u, t, _ in processes if t == "compute"}))
        ticks.append(
            GpuTick(gpu_id, state, util, memory, 8000, holders, None, named_jobs(processes))
        )
    opener = Tick(host_id=1, observed_us=0, gpus=tuple(ticks))
    deltas = [JobDelta(), GenericJobDelta()]
    for delta in deltas:
        view = OutsideView({} if since is None else {1: since * s})
        for (gpu_id, raw, user, start, length), sign in ranges:
            job = JobGpuRange.of(1, int(raw), 1, gpu_id, start * s, (start + length) * s, user, raw)
            delta.add_job_gpu(job, sign)
            view.add(job)
        delta.add_view(view)
        start, length = piece
        delta.credit_piece(opener, 0, start * s, (start + length) * s, 1)
    inlined, generic = deltas
    assert inlined.figures == generic.figures
    assert inlined.rides == generic.rides
    assert inlined.riders == generic.riders
    assert inlined.outside == generic.outside
    assert inlined.host_of_gpu == generic.host_of_gpu
