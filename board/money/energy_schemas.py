"""Electricity prices and carbon intensity as the API takes and shows them
(`GET/PUT …/energy-prices`, `GET/PUT …/carbon-intensity`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Annotated

from pydantic import BeforeValidator, Field, ValidationError

from board.errors import Unprocessable, describe_validation_errors
from board.money.schemas import _DECIMAL_TEXT, _In
from board.readmodels import IsoTime, ReadModel

# A dated list, one value per date: more than a value a month for forty years.
MAX_VALUES = 500


def _plain_decimal(name: str) -> Callable[[object], object]:
    """Numbers, or decimal strings in ASCII digits ("0.31"); never true/false (which
    Decimal would take as 1 and 0)."""

    def check(value: object) -> object:
        if isinstance(value, bool) or (
            isinstance(value, str) and not _DECIMAL_TEXT.fullmatch(value)
        ):
            raise ValueError(f"{name} must be a number or a decimal string such as '0.31'")
        return value

    return check


_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)


def _iso_day(value: object) -> object:
    """A date as YYYY-MM-DD only: it is read in the workspace's zone, so a time or an
    offset ("2026-11-01T00:00:00Z") would say something it does not mean."""
    if not isinstance(value, str) or not _ISO_DAY.fullmatch(value):
        raise ValueError("from must be a date such as '2026-11-01'")
    return value


Day = Annotated[date, BeforeValidator(_iso_day), Field(ge=date(2000, 1, 1), le=date(2100, 12, 31))]
PerKWh = Annotated[
    Decimal,
    BeforeValidator(_plain_decimal("perKWh")),
    Field(ge=0, le=1_000_000, max_digits=13, decimal_places=6, allow_inf_nan=False),
]
# The dirtiest grids are near 1,000 g/kWh; ten times that is no grid at all.
GramsPerKWh = Annotated[
    Decimal,
    BeforeValidator(_plain_decimal("gramsPerKWh")),
    Field(ge=0, le=10_000, max_digits=8, decimal_places=3, allow_inf_nan=False),
]


class EnergyPriceIn(_In):
    per_kwh: PerKWh = Field(alias="perKWh")
    from_: Day = Field(alias="from")


class EnergyPricesIn(_In):
    """The electricity prices, per kWh in the workspace's currency, each from a date."""

    # fail_fast: the first bad value is the answer, not one error per key of 500 of them.
    prices: Annotated[list[EnergyPriceIn], Field(max_length=MAX_VALUES, fail_fast=True)]


class CarbonValueIn(_In):
    grams_per_kwh: GramsPerKWh = Field(alias="gramsPerKWh")
    from_: Day = Field(alias="from")


class CarbonIntensityIn(_In):
    """The carbon intensity of the workspace's electricity, grams CO2e per kWh, each
    from a date."""

    values: Annotated[list[CarbonValueIn], Field(max_length=MAX_VALUES, fail_fast=True)]


class _DatedOut(ReadModel):
    # The first day it holds, in the workspace's zone, and the instant that day began.
    from_: date = Field(alias="from")
    starts_at: IsoTime
    # The next value's first day (null: holds on).
    until: date | None
    # Until then it may be corrected or removed; then it is fixed for good.
    correctable_until: IsoTime
    fixed: bool


class EnergyPriceOut(_DatedOut):
    per_kwh: float = Field(alias="perKWh")


class CarbonValueOut(_DatedOut):
    grams_per_kwh: float = Field(alias="gramsPerKWh")


class EnergyPricesOut(ReadModel):
    # The workspace's currency (set with the GPU-hour prices), null until it has one.
    currency: str | None
    minor_units: int | None
    # The workspace's today, in its zone (`timezone`), which dates the prices.
    today: date
    timezone: str
    correction_days: int
    prices: list[EnergyPriceOut]


class CarbonIntensityOut(ReadModel):
    today: date
    timezone: str
    correction_days: int
    values: list[CarbonValueOut]


class _DayIn(_In):
    from_: Day = Field(alias="from")


def value_day(day: str) -> date:
    """A value's date from a URL, checked as the body's are (422)."""
    try:
        return _DayIn.model_validate({"from": day}).from_
    except ValidationError as exc:
        raise Unprocessable(describe_validation_errors(exc.errors())) from None
