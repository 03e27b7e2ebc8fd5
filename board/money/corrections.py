"""The correction window: how long a dated price may still change once it prices hours.

Costs are computed whenever a report is read, from the rollups and the prices as they
are then, so changing a price changes the cost of every hour it priced. The window
bounds that. A price takes effect at its start, or when it was entered if it was dated
back; for `length` after that it may be corrected or removed, and a new price may be
dated back at most `length`. Once its window has closed a price is fixed and its hours
count as billed, so a cost that reports have shown for longer than the window never
changes again.

Nothing here is specific to GPU-hour prices: electricity prices and carbon intensities
(board/money/energy_rates.py) use the same window and sentences, naming themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from typing import Annotated

from fastapi import Depends

from board.errors import Conflict
from board.settings import SettingsDep

LOCAL = "%Y-%m-%d %H:%M"


@dataclass(frozen=True)
class CorrectionWindow:
    """How long after it takes effect a dated price may change (the operator's setting)."""

    length: timedelta

    @classmethod
    def of_days(cls, days: int) -> CorrectionWindow:
        return cls(timedelta(days=days))

    @property
    def days(self) -> int:
        return self.length.days

    def closes_at(self, starts_at: datetime, entered_at: datetime | None = None) -> datetime:
        """When a price starting at `starts_at`, entered at `entered_at`, becomes fixed."""
        took_effect = max(starts_at, entered_at) if entered_at is not None else starts_at
        return took_effect + self.length

    def is_open(
        self, now: datetime, starts_at: datetime, entered_at: datetime | None = None
    ) -> bool:
        return now < self.closes_at(starts_at, entered_at)

    def earliest_day(self, now: datetime, zone: tzinfo) -> date:
        """The first date whose midnight in `zone` may still start a new price at `now`."""
        day = (now - self.length).astimezone(zone).date()
        while not self.is_open(now, _midnight(day, zone)):
            day += timedelta(days=1)
        return day


def _midnight(day: date, zone: tzinfo) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=zone)


def _plural(noun: str) -> str:
    return noun[:-1] + "ies" if noun.endswith("y") else noun + "s"


def _rule(window: CorrectionWindow, noun: str) -> str:
    if not window.days:
        return f"a {noun} is fixed once it takes effect"
    return (
        f"a {noun} may be corrected or removed for {window.days} days after it takes effect "
        "(its start, or when it was entered if that was later)"
    )


def refuse_fixed(
    window: CorrectionWindow,
    what: str,
    now: datetime,
    zone: tzinfo,
    starts_at: datetime,
    entered_at: datetime,
    noun: str = "price",
) -> None:
    """409 when the stored price `what` (named for the admin) is past its window; `noun`
    names what kind of dated value it is."""
    if window.is_open(now, starts_at, entered_at):
        return
    closed = window.closes_at(starts_at, entered_at).astimezone(zone).strftime(LOCAL)
    raise Conflict(
        f"{what} is fixed since {closed}: {_rule(window, noun)}, and then its hours count "
        f"as billed, so it cannot change. Add a new {noun} from "
        f"{window.earliest_day(now, zone).isoformat()} or later instead."
    )


def refuse_backdated(
    window: CorrectionWindow,
    what: str,
    now: datetime,
    zone: tzinfo,
    starts_at: datetime,
    noun: str = "price",
) -> None:
    """409 when a new price `what` would start further back than the window reaches."""
    if window.is_open(now, starts_at):
        return
    back = f"more than {window.days} days ago" if window.days else "and that has begun"
    raise Conflict(
        f"{what} would start {starts_at.astimezone(zone).strftime(LOCAL)}, {back}: hours "
        f"that old count as billed and keep the {_plural(noun)} they had. A new {noun} may "
        "start on "
        f"{window.earliest_day(now, zone).isoformat()} or later."
    )


def price_window(settings: SettingsDep) -> CorrectionWindow:
    """The window of GPU-hour prices: `price_correction_days` (GUA_BOARD_…)."""
    return CorrectionWindow.of_days(settings.price_correction_days)


PriceWindowDep = Annotated[CorrectionWindow, Depends(price_window)]
