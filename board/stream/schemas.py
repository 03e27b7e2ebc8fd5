"""The stream's JSON for people (`GET …/stream/latest`; the SSE `util` events carry the
same sample fields, built on the hot path by hub.Sample.event), and the fleet stream's
frames (built on the hot path by frames.FleetView; these models only declare them).

The field order here is the wire order (board.readmodels)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import WithJsonSchema

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


class FleetHello(ReadModel):
    """The data of the fleet stream's first event, `hello`."""

    tick_seconds: float  # how often a frame is built
    keep_seconds: int | float  # how long a quiet host stays in the host table


# Declared as plain arrays with their shape in words: a tuple's `prefixItems` is valid
# JSON Schema 2020-12, but tools that read OpenAPI (schemathesis among them) still refuse
# it inside an event's `contentSchema`.
FleetHostEntry = Annotated[
    tuple[int, str, list[str]],
    WithJsonSchema(
        {
            "type": "array",
            "minItems": 3,
            "maxItems": 3,
            "description": "[index, hostId, [GPU UUID, …]]: a host's place in the table "
            "and its GPUs, in the order of its rows' figures.",
        }
    ),
]
FleetRow = Annotated[
    tuple[int, int, list[int], list[int]],
    WithJsonSchema(
        {
            "type": "array",
            "minItems": 4,
            "maxItems": 4,
            "description": "[index, ageMs, [utilPct, …], [memoryUsedMb, …]]: the host's "
            "newest sample; the agent's sample time is t - ageMs / 1000.",
        }
    ),
]


class FleetFrame(ReadModel):
    """The data of a `frame` event: a keyframe (the whole table) or what changed."""

    seq: int  # the tick's number in this process; a gap means nothing changed
    key: bool  # a keyframe: `hosts` is the whole table, replacing the one before
    t: float  # when the frame was built (the board's clock, epoch seconds)
    hosts: list[FleetHostEntry]  # a keyframe: every host; else new or changed ones
    rows: list[FleetRow]  # a keyframe: every host; else hosts with a new sample


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


def fleet_stream_schema() -> dict[str, Any]:
    """The OpenAPI media type of the fleet stream: `hello`, then a `frame` per tick in
    which something changed (the first a keyframe); `: keepalive` every 15 s when idle."""
    return {
        "itemSchema": {
            "oneOf": [
                _event("hello", FleetHello, "First: the tick, how long quiet hosts stay."),
                _event("frame", FleetFrame, "The fleet's newest samples (or what changed)."),
            ]
        }
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
