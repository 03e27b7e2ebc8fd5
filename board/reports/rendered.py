"""The utilization report as the API sends it, its rows written by PostgreSQL.

A 90-day per-GPU report is 90,000 rows (27 MiB of JSON). Building each row as a Python
dict and encoding it took longer than the query; PostgreSQL writes the rows as JSON or
CSV text instead, per GPU (or host) and in time order, in parallel workers where it can.
Python puts each block's key fields in front of its rows and joins the blocks into the
body. service.utilization_report builds the same rows as dicts (for the pages), and the
tests hold the two to the same output.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import psycopg
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format

from board.reports import repository as repo
from board.reports import service, utilization_sql
from board.reports.csv import LINE_END, csv_cells
from board.reports.params import Window
from board.reports.schemas import ReportCoverage, UtilizationHead

# Row fields after the key fields, in board-api.md's order, with their figure columns.
_FIELDS = (
    ("coveredHours", "covered"),
    ("activeHours", "active"),
    ("idleHeldHours", "idle_held"),
    ("idleHours", "idle"),
    ("avgUtilPct", "util_pct"),
    ("avgMemoryUsedPct", "memory_pct"),
)
# How every JSON row starts; each block's key fields go in front of it.
JSON_ROW_START = b'{"bucketStart":'


def _json_number(millionths: str) -> str:
    """A figure kept in millionths as the JSON number Python writes for millionths / 1e6:
    float8 text is the same shortest form, except that it writes whole numbers without
    ".0" (24, not 24.0), which would make them integers to a JSON reader. NULL: null."""
    return (
        f"CASE WHEN {millionths} IS NULL THEN 'null' "
        f"WHEN {millionths} %% 1000000 = 0 THEN ({millionths} / 1000000)::text || '.0' "
        f"ELSE ({millionths}::float8 / 1e6)::text END"
    )


def _csv_number(millionths: str) -> str:
    """A figure kept in millionths with exactly 6 decimals, as the CSV writes floats
    (fixed notation); NULL: an empty cell."""
    return (
        f"CASE WHEN {millionths} IS NULL THEN '' ELSE ({millionths} / 1000000)::text || '.' "
        f"|| lpad(({millionths} %% 1000000)::text, 6, '0') END"
    )


def _row_sql(fmt: str) -> tuple[str, str]:
    """The SQL text of one row (after its key fields) and the separator between rows."""
    if fmt == "json":
        fields = ", ".join(f"',\"{name}\":', {_json_number(column)}" for name, column in _FIELDS)
        return f"concat('{JSON_ROW_START.decode()}', lb.label, {fields}, '}}')", "','"
    fields = ", ".join(f"',', {_csv_number(column)}" for _, column in _FIELDS)
    return f"concat(lb.label, {fields})", "E'\\r\\n'"


async def _bucket_starts(
    conn: psycopg.AsyncConnection[Any], scope: repo.Scope, bucket: str
) -> list[datetime]:
    """Every bucket start the window's hours fall in, computed by the same expression the
    rows are bucketed with."""
    cur = await conn.execute(
        f"""
        SELECT DISTINCT {utilization_sql.hour_bucket_sql(bucket, "h")}
        FROM generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '1 hour',
                             interval '1 hour') AS h
        """,
        scope.params(),
    )
    return [r[0] for r in await cur.fetchall()]


class _Utf8Bytes(Loader):
    """Text as its UTF-8 bytes: the rendered rows go into the body as they are."""

    format = Format.BINARY

    def load(self, data: Buffer) -> bytes:
        return bytes(data)


async def _blocks(
    conn: psycopg.AsyncConnection[Any],
    scope: repo.Scope,
    group: str,
    bucket: str,
    fmt: str,
    labels: dict[datetime, str],
) -> dict[int, bytes]:
    """Per GPU (or host) id: its rows as text in time order, without key fields.

    `labels` maps each bucket start to its text (a JSON string, or the CSV cell).
    """
    row, separator = _row_sql(fmt)
    figures = utilization_sql.utilization_figures_sql(group, bucket, scope.host_id is not None)
    statement = f"""
        SELECT key, string_agg(row_text, {separator} ORDER BY bucket)
        FROM (
            SELECT key, bucket, {row} AS row_text
            FROM ({figures}) AS f
            JOIN unnest(%(starts)s::timestamptz[], %(labels)s::text[]) AS lb(start, label)
              ON lb.start = f.bucket
            ORDER BY key, bucket
        ) AS r
        GROUP BY key
    """
    values = {**scope.params(), "starts": list(labels), "labels": list(labels.values())}
    async with conn.cursor(binary=True) as cur:
        cur.adapters.register_loader("text", _Utf8Bytes)
        await cur.execute(statement, values)
        return {r[0]: r[1] for r in await cur.fetchall()}


@dataclass
class RenderedReport:
    """A utilization report whose rows are text already: one block of rows per GPU or
    host, in row order, each row with its key fields."""

    head: UtilizationHead
    columns: tuple[str, ...]
    fmt: str
    blocks: list[bytes]
    coverage: ReportCoverage

    def body(self) -> bytes:
        """The whole body, copied once: a 90-day per-GPU report is 27 MiB of JSON, and
        each copy of it costs ~10 ms."""
        if self.fmt == "json":
            first = orjson.dumps(self.head.model_dump())[:-1] + b',"rows":['
            separator = b","
            last = b'],"coverage":' + orjson.dumps(self.coverage.model_dump()) + b"}"
        else:
            first = (csv_cells(self.columns) + LINE_END).encode()
            separator = LINE_END.encode()
            last = separator if self.blocks else b""
        parts = [first]
        for block in self.blocks:
            parts += (block, separator)
        if self.blocks:
            parts.pop()
        parts.append(last)
        return b"".join(parts)


async def utilization(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    window: Window,
    group: str,
    bucket: str,
    fmt: str,
) -> RenderedReport:
    """The utilization report (service.utilization_report's rows) as JSON or CSV text."""
    scope = await service.utilization_scope(conn, workspace_id, window, bucket)
    with service.zone_known_to_database(window):
        labels = {}
        for start in await _bucket_starts(conn, scope, bucket):
            label = window.local(start).isoformat()
            # As each format writes a text cell (the CSV's way neutralizes formulas too);
            # PostgreSQL only puts the labels and its own figures together.
            labels[start] = orjson.dumps(label).decode() if fmt == "json" else csv_cells((label,))
        found = await _blocks(conn, scope, group, bucket, fmt, labels)
        coverage = await service.report_coverage(conn, scope, window)

    line_end = LINE_END.encode()
    blocks = []
    for key, keys in await service.ordered_keys(conn, workspace_id, group, set(found)):
        rows = found[key]
        if fmt == "json":
            # '{"hostId":…,"gpuName":…,' + '"bucketStart":…'. The row start occurs only
            # at the start of a row: a JSON string cannot hold an unescaped quote.
            prefix = orjson.dumps(keys)[:-1] + b"," + JSON_ROW_START[1:]
            blocks.append(rows.replace(JSON_ROW_START, prefix))
        else:
            # Rows are numbers and ISO times: a line end occurs only between rows.
            # csv_cells quotes the key cells and neutralizes any that would start a
            # spreadsheet formula, exactly as render_csv does for the built report.
            prefix = (csv_cells(keys.values()) + ",").encode()
            blocks.append(prefix + rows.replace(line_end, line_end + prefix))
    columns = service.KEY_FIELDS[group] + service.UTILIZATION_FIGURES
    head = service.utilization_head(window, group, bucket)
    return RenderedReport(head, columns, fmt, blocks, coverage)
