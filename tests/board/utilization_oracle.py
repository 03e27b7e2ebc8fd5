"""The utilization report built the slow, obvious way, to hold the one the board sends to.

The board renders the report in PostgreSQL and streams it (board.reports.
utilization_stream). Here the same figures are read as plain numbers, each row is built
as a Python dict, and the bodies are written from those dicts: JSON as the board's
numbers read (floats in their shortest form, whole ones with ".0"), CSV by the CSV
writer of the usage report. Tests hold the streamed bytes to these.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import groupby
from operator import itemgetter
from typing import Any

import orjson
import psycopg

from board.reportkit.csv import render_csv
from board.reportkit.params import Window
from board.reports import service, utilization_sql
from board.reports import utilization_stream as streamed
from board.reports.schemas import ReportCoverage, UtilizationHead


@dataclass
class UtilizationReport:
    """The report with its rows as dicts (keys in `columns` order)."""

    head: UtilizationHead
    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    coverage: ReportCoverage

    def as_json(self) -> dict[str, Any]:
        """The body as a JSON object (schemas.UtilizationReportOut)."""
        body = self.head.model_dump()
        body["rows"] = self.rows
        body["coverage"] = self.coverage.model_dump()
        return body

    def body(self, fmt: str) -> bytes:
        """The body the board must send, byte for byte."""
        if fmt == "csv":
            return render_csv(self).encode()
        head = orjson.dumps(self.head.model_dump())[:-1]
        rows = b",".join(_json_row(row) for row in self.rows)
        coverage = orjson.dumps(self.coverage.model_dump())
        return head + b',"rows":[' + rows + b'],"coverage":' + coverage + b"}"


def _json_row(row: dict[str, Any]) -> bytes:
    # A figure as Python writes the float (repr: 1e-06, 24.0), the rest as orjson does.
    fields = (
        orjson.dumps(name) + b":" + (repr(v).encode() if isinstance(v, float) else orjson.dumps(v))
        for name, v in row.items()
    )
    return b"{" + b",".join(fields) + b"}"


async def _rows(
    conn: psycopg.AsyncConnection[Any], scope: Any, group: str, bucket: str
) -> list[tuple[Any, ...]]:
    """(gpu_id or host_id, bucket start in epoch seconds, coveredHours …
    energyCoveredHours), each GPU's (or host's) rows together and in time order."""
    statement = f"""
        SELECT key, extract(epoch FROM bucket)::bigint,
               {", ".join(f"{f}::float8 / 1e6" for f in utilization_sql.FIGURES)}
        FROM ({utilization_sql.utilization_figures_sql(group, bucket, scope.host_id is not None)})
             AS f
        ORDER BY key, bucket
    """
    async with conn.cursor(binary=True) as cur:
        await cur.execute(statement, scope.params())
        return await cur.fetchall()


async def built_report(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    window: Window,
    group: str,
    bucket: str,
    host_id: int | None = None,
) -> UtilizationReport:
    """Per host or GPU and hour or day: time in each state, mean utilization and memory,
    row by row. `host_id`: only that host's GPUs (or itself)."""
    scope = await service.utilization_scope(conn, workspace_id, window, bucket, host_id)
    with service.zone_known_to_database(window):
        found = await _rows(conn, scope, group, bucket)
        coverage = await service.report_coverage(conn, scope, window)

    # Rows come grouped by id and in time order; the blocks go in name order.
    blocks = {key: list(rows) for key, rows in groupby(found, key=itemgetter(0))}
    rows: list[dict[str, Any]] = []
    for key, keys in await service.ordered_keys(conn, workspace_id, group, set(blocks)):
        for found in blocks[key]:
            _, epoch, covered, active, idle_held, idle, util, memory = found[:8]
            energy, idle_energy, power, energy_covered = found[8:]
            start = window.local(datetime.fromtimestamp(epoch, UTC)).isoformat()
            rows.append(
                {
                    **keys,
                    "bucketStart": start,
                    "coveredHours": covered,
                    "activeHours": active,
                    "idleHeldHours": idle_held,
                    "idleHours": idle,
                    "avgUtilPct": util,
                    "avgMemoryUsedPct": memory,
                    "energyKWh": energy,
                    "idleEnergyKWh": idle_energy,
                    "avgPowerW": power,
                    "energyCoveredHours": energy_covered,
                }
            )
    head = service.utilization_head(window, group, bucket)
    columns = service.KEY_FIELDS[group] + service.UTILIZATION_FIGURES
    return UtilizationReport(head, columns, rows, coverage)


async def sent_body(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    window: Window,
    group: str,
    bucket: str,
    fmt: str,
    host_id: int | None = None,
) -> bytes:
    """The body the board streams for the report (in process, none of its blocks kept)."""
    return await streamed.utilization_body(conn, workspace_id, window, group, bucket, fmt, host_id)
