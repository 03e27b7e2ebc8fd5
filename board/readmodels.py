"""What every domain's read models share: camelCase JSON, snake_case attributes, times.

Attributes are snake_case (templates read `host.display_name`); the JSON keys are their
camelCase aliases, in declaration order: a model's field order is the wire order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, PlainSerializer, WithJsonSchema
from pydantic.alias_generators import to_camel

# Python's isoformat ("+00:00"), as the API has always written times; pydantic's own
# datetime serialization would write "Z".
IsoTime = Annotated[
    datetime,
    PlainSerializer(datetime.isoformat, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


class ReadModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        serialize_by_alias=True,
        from_attributes=True,
        frozen=True,
        # /docs lists a field with a default (processes: null) as always present, as it is.
        json_schema_serialization_defaults_required=True,
    )
