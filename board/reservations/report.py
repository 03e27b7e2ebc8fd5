"""GET …/reports/reservations: reserved against used GPU-hours, per booking, member,
host or day (accounting.md, "Reservations"), JSON or CSV.

Reads the per-hour figures the ingest path credits (from both places they are kept in,
board.reservations.figures) and the bookings' ranges; never a scan of raw samples. The
window and zone rules are the usage report's (board.reportkit.params): whole UTC hours, a
local day being the UTC hours that start on it (a date: its first such hour).
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from board.readmodels import ReadModel
from board.reportkit.csv import spreadsheet_text
from board.reportkit.params import FORMATS, Window, parse_choice, parse_window
from board.reservations.crediting import FIGURE_COLUMNS
from board.reservations.figures import FIGURE_ROWS

GROUPS = ("reservation", "member", "host", "day")
HOUR_US = 3_600_000_000
FIGURES = (
    "reservedGpuHours",
    "coveredGpuHours",
    "usedGpuHours",
    "idleHeldGpuHours",
    "conflictGpuHours",
    "unusedGpuHours",
    "reservedIdleGpuHours",
    "usedShare",
)
KEY_FIELDS = {
    "reservation": ("reservationId", "memberEmail", "hostId", "gpuUuids", "start", "end"),
    "member": ("memberEmail",),
    "host": ("hostId", "displayName"),
    "day": ("day",),
}


class ReservationReportOut(ReadModel):
    """For /docs: rows carry their key fields and FIGURES; totals the FIGURES."""

    from_: str
    to: str
    group_by: str
    tz: str
    # As in the usage report: what a local day is in a zone not whole hours from UTC.
    hour_alignment: str | None
    rows: list[dict[str, Any]]
    totals: dict[str, Any]


def _hours(us: int) -> float:
    return round(us / HOUR_US, 6)


@dataclass
class _Sums:
    reserved: int = 0
    figures: list[int] = field(default_factory=lambda: [0] * len(FIGURE_COLUMNS))

    def add(self, other: _Sums) -> None:
        self.reserved += other.reserved
        self.figures = [a + b for a, b in zip(self.figures, other.figures, strict=True)]

    def shown(self) -> dict[str, Any]:
        covered, used, idle_held, conflict, unused = self.figures
        return {
            "reservedGpuHours": _hours(self.reserved),
            "coveredGpuHours": _hours(covered),
            "usedGpuHours": _hours(used),
            "idleHeldGpuHours": _hours(idle_held),
            "conflictGpuHours": _hours(conflict),
            "unusedGpuHours": _hours(unused),
            "reservedIdleGpuHours": _hours(idle_held + unused),
            "usedShare": None if covered == 0 else round(used / covered, 6),
        }


@dataclass
class BuiltReport:
    window: Window
    group_by: str
    format: str
    rows: list[dict[str, Any]]
    totals: dict[str, Any]

    def json(self) -> bytes:
        return json.dumps(
            {
                "from": self.window.start.isoformat(),
                "to": self.window.end.isoformat(),
                "groupBy": self.group_by,
                "tz": self.window.tz_name,
                "hourAlignment": self.window.hour_alignment(),
                "rows": self.rows,
                "totals": self.totals,
            }
        ).encode()

    def csv(self) -> str:
        columns = (*KEY_FIELDS[self.group_by], *FIGURES)
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\r\n")
        writer.writerow(columns)
        for row in self.rows:
            writer.writerow([_cell(row[c]) for c in columns])
        return out.getvalue()


def _cell(value: object) -> object:
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    if isinstance(value, str):
        return spreadsheet_text(value)  # never a formula in a spreadsheet
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6f}"
    return value


_BOOKINGS = """
    SELECT r.id, r.public_id, u.email, h.public_id, h.display_name, lower(r.during),
           upper(r.during),
           ARRAY(SELECT g.uuid FROM reservation_gpus rg
                 JOIN gpus g ON g.workspace_id = rg.workspace_id AND g.id = rg.gpu_id
                 WHERE rg.workspace_id = r.workspace_id AND rg.reservation_id = r.id
                 ORDER BY g.gpu_index, g.uuid)
    FROM reservations r
    JOIN hosts h ON h.workspace_id = r.workspace_id AND h.id = r.host_id
    JOIN users u ON u.id = r.user_id
    WHERE r.workspace_id = %(ws)s AND upper(r.during) > %(from)s
      AND r.during && tstzrange(%(from)s, %(to)s)
    ORDER BY lower(r.during), r.id
"""

# Both places a booking's hours are kept in (board.reservations.figures).
_FIGURES = f"""
    SELECT reservation_id, hour_start, sum(covered_us)::bigint, sum(used_us)::bigint,
           sum(idle_held_us)::bigint, sum(conflict_us)::bigint, sum(unused_us)::bigint
    FROM ({FIGURE_ROWS}) AS f
    GROUP BY reservation_id, hour_start
"""


async def host_names(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> dict[str, str]:
    cur = await conn.execute(
        "SELECT public_id, display_name FROM hosts WHERE workspace_id = %s", [workspace_id]
    )
    return {str(p): str(n) for p, n in await cur.fetchall()}


def _reserved_by_day(window: Window, start: datetime, end: datetime, gpus: int) -> dict[str, int]:
    """The booking's GPU-µs inside the window, cut where the local days begin (the first
    hour of each: Window.day_start), as the hour figures are keyed by their hour's day."""
    lo, hi = max(start, window.start), min(end, window.end)
    out: dict[str, int] = {}
    while lo < hi:
        day = window.day_of(lo)
        # In UTC: two times sharing the zone's tzinfo subtract as wall-clock times, which
        # made the day the clocks spring forward 24 hours long (and fall back, 24).
        next_day = window.day_start(day + timedelta(days=1)).astimezone(UTC)
        cut = min(hi, next_day)
        out[day.isoformat()] = (cut - lo) // timedelta(microseconds=1) * gpus
        lo = cut
    return out


@dataclass(frozen=True)
class Asked:
    """The report's parameters, checked (a 422 before any database work)."""

    window: Window
    group: str
    format: str


def parse_query(
    from_: str | None, to: str | None, group_by: str | None, tz: str | None, fmt: str | None
) -> Asked:
    window = parse_window(from_, to, tz)
    group = parse_choice("groupBy", group_by, GROUPS, "reservation")
    chosen_format = parse_choice("format", fmt, FORMATS, "json")
    return Asked(window, group, chosen_format)


async def build(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    from_: str | None,
    to: str | None,
    group_by: str | None,
    tz: str | None,
    fmt: str | None,
) -> BuiltReport:
    return await build_asked(conn, workspace_id, parse_query(from_, to, group_by, tz, fmt))


async def build_asked(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, asked: Asked
) -> BuiltReport:
    window, group, chosen_format = asked.window, asked.group, asked.format
    bounds = {"ws": workspace_id, "from": window.start, "to": window.end}
    cur = await conn.execute(_BOOKINGS, bounds)
    bookings = await cur.fetchall()
    cur = await conn.execute(_FIGURES, bounds)
    figures = await cur.fetchall()

    sums: dict[tuple[Any, ...], _Sums] = defaultdict(_Sums)
    keys_of: dict[int, dict[str, Any]] = {}
    for rid, public, email, host, name, start, end, uuids in bookings:
        keys = {
            "reservation": (str(public),),
            "member": (email,),
            "host": (str(host),),
        }
        keys_of[rid] = {
            "fields": {
                "reservationId": str(public),
                "memberEmail": email,
                "hostId": str(host),
                "displayName": name,
                "gpuUuids": list(uuids),
                "start": start.isoformat(),
                "end": end.isoformat(),
            },
            "key": keys.get(group),
        }
        for day, reserved in _reserved_by_day(window, start, end, len(uuids)).items():
            key = (day,) if group == "day" else keys[group]
            sums[key].reserved += reserved
    for rid, hour, *values in figures:
        booking = keys_of.get(rid)
        if booking is None:
            continue
        key = (window.day_of(hour).isoformat(),) if group == "day" else booking["key"]
        row = sums[key]
        row.figures = [a + b for a, b in zip(row.figures, values, strict=True)]

    fields_of_key = {b["key"]: b["fields"] for b in keys_of.values() if b["key"] is not None}
    rows: list[dict[str, Any]] = []
    total = _Sums()
    for key in (
        sorted(sums, key=lambda k: tuple(str(p) for p in k)) if group != "reservation" else sums
    ):
        if group == "day":
            head: dict[str, Any] = {"day": key[0]}
        else:
            shown = fields_of_key[key]
            head = {name: shown[name] for name in KEY_FIELDS[group]}
        rows.append({**head, **sums[key].shown()})
        total.add(sums[key])
    return BuiltReport(window, group, chosen_format, rows, total.shown())
