"""CSV for finance: the same rows as the JSON, a header line, one row a line."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

from board.reports.service import Report

LINE_END = "\r\n"


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float):
        # Fixed notation: a spreadsheet must never see 1e-06.
        return f"{value:.6f}"
    return value


def csv_cells(values: Iterable[object]) -> str:
    """One row's cells as CSV, without the line end."""
    out = io.StringIO()
    csv.writer(out, lineterminator=LINE_END).writerow([_cell(v) for v in values])
    return out.getvalue()[: -len(LINE_END)]


def render_csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=LINE_END)
    writer.writerow(report.columns)
    writer.writerows([_cell(row[c]) for c in report.columns] for row in report.rows)
    return out.getvalue()
