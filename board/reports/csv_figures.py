"""A usage report's CSV lines, built without a cell() call and a csv writer per field.

The same text the CSV writer gives the buffered report's rows (board.reportkit.csv:
render_csv): a row's key fields are few and repeat (a GPU's five on each of its 90 days),
so each key's cells are written once by the csv module and kept; figures are the
board's own numbers, never quoted, written with six fixed decimals as cell() writes
them. A 90,000-row CSV body spent most of its Python time on its cells.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date
from typing import Any

from board.reportkit.csv import csv_cells

KeyText = Callable[[tuple[Any, ...]], str]


def fields_text(values: Sequence[object]) -> str:
    """Cells as the csv writer writes them inside a longer row (one empty cell alone
    would be written as "")."""
    return csv_cells((*values, ""))[:-1]


def cached_key(at: int, values_of: Callable[[Any], Sequence[object]]) -> KeyText:
    """The cells of the key in column `at` of a SQL row, written once per key value."""
    cache: dict[Any, str] = {}

    def text(row: tuple[Any, ...]) -> str:
        value = row[at]
        found = cache.get(value)
        if found is None:
            found = cache[value] = fields_text(values_of(value))
        return found

    return text


def day_key(at: int) -> KeyText:
    def text(row: tuple[Any, ...]) -> str:
        day: date = row[at]
        return day.isoformat()

    return text


def month_key(at: int) -> KeyText:
    """A month key's cell: `YYYY-MM` (service.month_text)."""

    def text(row: tuple[Any, ...]) -> str:
        first: date = row[at]
        return first.isoformat()[:7]

    return text


def six(value: float | str | None) -> str:
    """A figure as cell() writes it: six fixed decimals; money text as it is; null empty."""
    if value is None:
        return ""
    return value if isinstance(value, str) else f"{value:.6f}"
