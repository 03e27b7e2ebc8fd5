"""The stream's JSON for people (`GET …/stream/latest`; the SSE `util` events carry the
same sample fields, built on the hot path by hub.Sample.event).

The field order here is the wire order (board.readmodels)."""

from __future__ import annotations

from typing import Any

from board.readmodels import ReadModel


class StreamGpu(ReadModel):
    uuid: str
    util_pct: int
    memory_used_mb: int


class StreamSample(ReadModel):
    """A host's sample: the data of a `util` event."""

    host_id: str
    ts: float  # the agent's clock, epoch seconds
    at: str  # ts as an ISO time (UTC)
    gpus: list[StreamGpu]
    dropped: int  # bad messages dropped on the host's connection so far


class StreamHello(ReadModel):
    """The data of the stream's first event, `hello`."""

    # int | float: the configured int is sent as it is (300, not 300.0).
    keep_seconds: int | float
    host_id: str | None  # the stream's hostId filter, as samples carry it


class LatestSample(StreamSample):
    """A host's newest sample this process kept, and how long ago it arrived."""

    seconds_ago: float


class StreamLatest(ReadModel):
    # int | float: the configured int is sent as it is (300, not 300.0).
    keep_seconds: int | float
    hosts: list[LatestSample]


def _event(name: str, data: type[ReadModel], description: str) -> dict[str, Any]:
    schema = data.model_json_schema(
        mode="serialization", ref_template="#/components/schemas/{model}"
    )
    schema.pop("$defs", None)  # StreamGpu: a component, as /stream/latest answers it
    return {
        "description": description,
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"const": name},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": schema,
            },
        },
    }


def event_stream_schema() -> dict[str, Any]:
    """The OpenAPI media type of the live stream: each Server-Sent Event (as OpenAPI 3.2's
    `itemSchema` and FastAPI write them) is a `hello`, then `util` samples; a comment
    line (`: keepalive`) every 15 s carries no event."""
    return {
        "itemSchema": {
            "oneOf": [
                _event("hello", StreamHello, "First: how long samples are kept, the filter."),
                _event("util", StreamSample, "A host's sample: its GPUs' utilization."),
            ]
        }
    }
