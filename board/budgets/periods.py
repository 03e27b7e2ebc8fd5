"""Budget periods: a month ("2026-12") or a quarter ("2026-Q4"), cut in the workspace's
zone as the reports cut local days (board/reportkit/params.py: a local date is the UTC
hours that start on it), so a period's figures are the usage report's for the same dates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from board.errors import Unprocessable
from board.reportkit.params import Window, local_day_hour, parse_window

KINDS = ("month", "quarter")
FIRST_YEAR, LAST_YEAR = 2000, 2100
# ASCII digits only ("٢٠٢٦-١٢" is no period here); a quarter's Q in either case.
_MONTH = re.compile(r"^(\d{4})-(\d{2})$", re.ASCII)
_QUARTER = re.compile(r"^(\d{4})-[Qq]([1-4])$", re.ASCII)


@dataclass(frozen=True)
class Period:
    """[first, following): the local dates of one month or quarter."""

    kind: str
    first: date
    following: date

    @property
    def name(self) -> str:
        if self.kind == "month":
            return f"{self.first.year:04d}-{self.first.month:02d}"
        return f"{self.first.year:04d}-Q{(self.first.month - 1) // 3 + 1}"

    def window(self, zone: str) -> Window:
        """The period's hours: its first local date's first hour to the next period's."""
        return parse_window(
            local_day_hour(self.first, zone), local_day_hour(self.following, zone), zone
        )


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def period_of(day: date, kind: str) -> Period:
    """The month or quarter that holds a local date."""
    if kind == "month":
        first = day.replace(day=1)
        return Period("month", first, _add_months(first, 1))
    first = date(day.year, (day.month - 1) // 3 * 3 + 1, 1)
    return Period("quarter", first, _add_months(first, 3))


def parse_period(value: str | None, today: date) -> Period:
    """`2026-12` or `2026-Q4`; the month holding `today` when absent."""
    if value is None or value.strip() == "":
        return period_of(today, "month")
    text = value.strip()
    month, quarter = _MONTH.match(text), _QUARTER.match(text)
    if not (quarter or (month and 1 <= int(month[2]) <= 12)):
        raise Unprocessable(
            f"period {value[:20]!r} is neither a month (2026-12) nor a quarter (2026-Q4)."
        )
    found = month or quarter
    assert found is not None
    # The year before any date is made: 9999-12 would end in year 10000, 0000-01 not begin.
    if not FIRST_YEAR <= int(found[1]) <= LAST_YEAR:
        raise Unprocessable(
            f"period {text!r} is out of range; budgets cover {FIRST_YEAR} to {LAST_YEAR}."
        )
    if month:
        return period_of(date(int(month[1]), int(month[2]), 1), "month")
    assert quarter is not None
    return period_of(date(int(quarter[1]), 3 * int(quarter[2]) - 2, 1), "quarter")
