"""Prices as the API takes and shows them (`GET/PUT …/prices`)."""

from __future__ import annotations

import re
from datetime import date
from decimal import Decimal
from typing import Annotated

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from board.errors import NO_CONTROL, Unprocessable, describe_validation_errors
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


class PriceKeyIn(_In):
    """Which price: a GPU model and the date it starts."""

    gpu_model: GpuModel
    from_: Day = Field(alias="from")


class PriceIn(PriceKeyIn):
    per_gpu_hour: PerGpuHour


class PriceAmountIn(_In):
    """One price's amount (`PUT …/prices/{from}/{gpuModel}`)."""

    per_gpu_hour: PerGpuHour


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
    # Until then it may be corrected or removed: the correction window after it took
    # effect (its start, or when it was entered if later); then it is fixed for good.
    correctable_until: IsoTime
    fixed: bool


class PricesOut(ReadModel):
    currency: str | None
    minor_units: int | None
    # The workspace's today, in its zone (`timezone`), which dates prices.
    today: date
    timezone: str
    # How long after it takes effect a price may be corrected (docs/money.md).
    correction_days: int
    prices: list[PriceOut]


def price_key(gpu_model: str, day: str) -> PriceKeyIn:
    """A price's model and date from a URL or a form, checked as the body's are (422)."""
    try:
        return PriceKeyIn.model_validate({"gpuModel": gpu_model, "from": day})
    except ValidationError as exc:
        raise Unprocessable(describe_validation_errors(exc.errors())) from None


def price_entry(gpu_model: str, day: str, per_gpu_hour: object) -> PriceIn:
    """One price from a URL or a form, checked as the body's are (422)."""
    try:
        return PriceIn.model_validate(
            {"gpuModel": gpu_model, "from": day, "perGpuHour": per_gpu_hour}
        )
    except ValidationError as exc:
        raise Unprocessable(describe_validation_errors(exc.errors())) from None
