"""CSV for finance: the same rows as the JSON, a header line, one row a line.

Text cells carry names hosts report (Linux users, host and GPU names): a spreadsheet
must show them as text, never run them as formulas (OWASP "CSV injection").
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

LINE_END = "\r\n"

# A cell starting with one of these is a formula to Excel, LibreOffice or Sheets (tab, CR
# and LF are skipped by some importers, so what follows them counts). The full-width forms
# are folded to their ASCII ones by some spreadsheets in East Asian locales.
FORMULA_STARTS = frozenset("=+-@\t\r\n\uff1d\uff0b\uff0d\uff20")


def spreadsheet_text(text: str) -> str:
    """A text cell as a spreadsheet must show it: one that would start a formula gets a
    single quote in front (the spreadsheets' own "this is text" mark)."""
    return "'" + text if text and text[0] in FORMULA_STARTS else text


class Table(Protocol):
    """What the CSV writer takes: a report's columns and its rows (keyed by column)."""

    @property
    def columns(self) -> Sequence[str]: ...

    @property
    def rows(self) -> Sequence[Mapping[str, Any]]: ...


def cell(value: object) -> object:
    """A value as the CSV writer gets it: text made formula-safe, None empty, floats in
    fixed notation with 6 decimals."""
    # Text cells only: figures are the board's own numbers and go as they are.
    # spreadsheet_text inlined: a call per cell costs ~15 % on a 90,000-row report.
    if isinstance(value, str):
        return "'" + value if value and value[0] in FORMULA_STARTS else value
    if value is None:
        return ""
    if isinstance(value, float):
        # Fixed notation: a spreadsheet must never see 1e-06.
        return f"{value:.6f}"
    return value


def csv_cells(values: Iterable[object]) -> str:
    """One row's cells as CSV, without the line end."""
    out = io.StringIO()
    csv.writer(out, lineterminator=LINE_END).writerow([cell(v) for v in values])
    return out.getvalue()[: -len(LINE_END)]


# Columns of money: written with the currency's digits.
MONEY_COLUMNS = frozenset({"cost", "energyCost"})


def render_csv(report: Table, cost_digits: int = 2) -> str:
    """`cost_digits`: the currency's minor digits (money is written "19.22", not with the
    six decimals of hours)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=LINE_END)
    writer.writerow(report.columns)
    writer.writerows(
        [
            f"{row[c]:.{cost_digits}f}"
            if c in MONEY_COLUMNS and isinstance(row[c], float)
            else cell(row[c])
            for c in report.columns
        ]
        for row in report.rows
    )
    return out.getvalue()
