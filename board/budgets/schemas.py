"""Budgets as the API takes and shows them (`PUT …/budgets/{team}`, `GET …/budgets`,
`GET …/reports/budgets`)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from board.readmodels import IsoTime, ReadModel

# Bounds that no real lab reaches and NUMERIC(15,6) / (17,4) hold: a larger number is a
# typo (or a probe) and gets a 422 saying so.
MAX_GPU_HOURS = 100_000_000
MAX_AMOUNT = 1_000_000_000_000


def _unsigned_zero(value: Decimal) -> Decimal:
    """-0 passes `ge=0`; adding 0 makes it 0, so no answer or audit entry says -0.0."""
    return value + 0


GpuHours = Annotated[
    Decimal,
    Field(ge=0, le=MAX_GPU_HOURS, max_digits=15, decimal_places=6, allow_inf_nan=False),
    AfterValidator(_unsigned_zero),
]
Amount = Annotated[
    Decimal,
    Field(ge=0, le=MAX_AMOUNT, max_digits=17, decimal_places=4, allow_inf_nan=False),
    AfterValidator(_unsigned_zero),
]
Day = Annotated[date, Field(ge=date(2000, 1, 1), le=date(2100, 12, 31))]


class BudgetIn(BaseModel):
    """A team's budget per month or quarter from the period holding `from` on; neither
    figure (both null or left out): no budget from that period on."""

    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, extra="forbid")

    period: Literal["month", "quarter"]
    gpu_hours: GpuHours | None = None
    amount: Amount | None = None
    from_: Day = Field(alias="from")


class BudgetOut(ReadModel):
    team: str
    period: str
    gpu_hours: float | None
    amount: float | None
    from_: date = Field(alias="from")
    # The first day of the period `from` falls in: the budget holds from there.
    period_start: date


class BudgetsOut(ReadModel):
    """Every budget entry of the workspace, by team, kind and date."""

    currency: str | None
    budgets: list[BudgetOut]


class BudgetRow(ReadModel):
    """One team in one period: its budget, what it used, and the forecast at the end."""

    team: str | None
    period: str
    budget_gpu_hours: float | None
    used_gpu_hours: float
    budget_amount: float | None
    cost: float | None
    # The larger of used/budget in GPU-hours and cost/amount (null: no budget, or 0).
    used_share: float | None
    # used + paceGpuHoursPerDay × the report's remainingDays.
    forecast_gpu_hours: float
    forecast_share: float | None
    pace_gpu_hours_per_day: float
    forecast_cost: float | None
    currency: str | None
    # The date of the budget entry in force (null: none).
    budget_from: date | None
    # none (no budget), ok, warning (used or forecast >= 80 %), exceeded (used >= 100 %).
    status: str


class BudgetReportOut(ReadModel):
    period: str
    period_kind: str
    from_: IsoTime = Field(alias="from")
    to: IsoTime
    tz: str
    # The forecast's clock: now, and the days left in the period from it (0 once over).
    as_of: IsoTime
    remaining_days: float
    # The pace is the GPU-hours (and cost) of these days, divided by paceDays.
    pace_days: int
    pace_from: IsoTime
    pace_to: IsoTime
    forecast_rule: str
    currency: str | None
    rows: list[BudgetRow]
