"""CSV for finance: the same rows as the JSON, a header line, one row a line."""

from __future__ import annotations

import csv
import io

from board.reports.service import Report


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float):
        # Fixed notation: a spreadsheet must never see 1e-06.
        return f"{value:.6f}"
    return value


def render_csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(report.columns)
    writer.writerows([_cell(row[c]) for c in report.columns] for row in report.rows)
    return out.getvalue()
