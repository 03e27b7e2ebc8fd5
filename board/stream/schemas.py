"""The stream's JSON for people (`GET …/stream/latest`; the SSE `util` events carry the
same sample fields, built on the hot path by hub.Sample.event).

The field order here is the wire order (board.readmodels)."""

from __future__ import annotations

from board.readmodels import ReadModel


class StreamGpu(ReadModel):
    uuid: str
    util_pct: int
    memory_used_mb: int


class LatestSample(ReadModel):
    """A host's newest sample this process kept, and how long ago it arrived."""

    host_id: str
    ts: float  # the agent's clock, epoch seconds
    at: str  # ts as an ISO time (UTC)
    gpus: list[StreamGpu]
    dropped: int  # bad messages dropped on the host's connection so far
    seconds_ago: float


class StreamLatest(ReadModel):
    # int | float: the configured int is sent as it is (300, not 300.0).
    keep_seconds: int | float
    hosts: list[LatestSample]
