"""Prices as the API takes and shows them (`GET/PUT …/prices`)."""

from __future__ import annotations

import re
from datetime import date
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

from board.errors import NO_CONTROL
from board.readmodels import IsoTime, ReadModel

MAX_PRICES = 500
# A GPU's name as its agent reports it ("NVIDIA A100-SXM4-80GB"), or "*".
GpuModel = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=NO_CONTROL)]
# A decimal string in ASCII digits: Decimal() alone also reads "1_0" as 10 and "١" or
# "１" (Arabic-Indic, full-width) as 1.
_DECIMAL_TEXT = re.compile(r" *[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)? *", re.ASCII)


def _plain_decimal(value: object) -> object:
    if isinstance(value, str) and not _DECIMAL_TEXT.fullmatch(value):
        raise ValueError("perGpuHour must be a number or a decimal string such as '2.10'")
    return value


PerGpuHour = Annotated[
    Decimal,
    BeforeValidator(_plain_decimal),
    Field(ge=0, le=1_000_000, max_digits=13, decimal_places=6, allow_inf_nan=False),
]
Day = Annotated[date, Field(ge=date(2000, 1, 1), le=date(2100, 12, 31))]


class _In(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, extra="forbid")


class PriceIn(_In):
    gpu_model: GpuModel
    per_gpu_hour: PerGpuHour
    from_: Day = Field(alias="from")


class PricesIn(_In):
    currency: Annotated[str, StringConstraints(min_length=1, max_length=12)]
    # fail_fast: the first bad price is the answer, not one error per key of 500 of them.
    prices: Annotated[list[PriceIn], Field(max_length=MAX_PRICES, fail_fast=True)]


class PriceOut(ReadModel):
    gpu_model: str
    per_gpu_hour: float
    # The first day it holds, in the workspace's zone, and the instant that day began.
    from_: date = Field(alias="from")
    starts_at: IsoTime
    # The next price's first day for the same model (null: holds on).
    until: date | None
    # In force or past: never changed again (docs/money.md).
    fixed: bool


class PricesOut(ReadModel):
    currency: str | None
    minor_units: int | None
    # The workspace's today: prices from this day or earlier are fixed.
    today: date
    timezone: str
    prices: list[PriceOut]
