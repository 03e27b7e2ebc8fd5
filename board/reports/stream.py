"""Report bodies streamed as PostgreSQL produces them, in bounded memory.

Each report is read in two steps. `prepare` runs in the request, before any byte is sent:
it checks what only the database can check (a zone it does not know is a 422, not a
broken body), resolves the keys' names and their order, and runs the first query. Then
the body streams: the rows a batch at a time, the totals and coverage last, as the JSON
shape has them. The usage body's bytes are exactly those of the buffered report (the
pages' path, `service.usage_report`; tests hold them equal), only sent as they come: a
worker holds one batch of rows at a time, whatever the window. The utilization report
is board.reports.utilization_stream.

Row order is the buffered reports' order. Keys are hosts and GPUs in name order,
users, days and months ascending; PostgreSQL sorts by each host's (or GPU's) position in the
name order, which Python computes once per report for every key the workspace has.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import date
from typing import Any

import orjson
import psycopg

from board.pricing.cost import (
    Pricing,
    amount,
    amount_text,
    exact,
    window_pricing,
    workspace_currency,
)
from board.pricing.energy import UWS_PER_MICRO_KWH
from board.reportkit.csv import LINE_END, csv_cells
from board.reportkit.figures import HOUR_US
from board.reportkit.params import Window
from board.reports import repository as repo
from board.reports import service
from board.reports.csv_figures import KeyText, cached_key, day_key, month_key, six
from board.reports.energy import (
    ENERGY_FIGURES,
    NO_ENERGY,
    energy_columns,
    energy_sums,
    named_energy_sql,
    summed,
)

# reportkit.figures.hours' divisor: microseconds per micro-hour.
_US_PER_MICRO_HOUR = HOUR_US // 1_000_000
# Rows per usage fetch: a few MiB of text in the worker at a time.
FETCH_ROWS = 2_000

Chunks = AsyncIterator[bytes]
# Key fields of an id the name tables no longer have (as service._Names shows it).
DELETED: dict[str, dict[str, Any]] = {
    "host": {"hostId": None, "displayName": "(deleted host)"},
    "gpu": {
        "hostId": None,
        "displayName": "(deleted host)",
        "gpuUuid": None,
        "gpuIndex": None,
        "gpuName": None,
    },
}

_KNOWN_KEYS = {
    "gpu": """
        SELECT id FROM gpus WHERE workspace_id = %(ws)s
        UNION
        SELECT id FROM (
            WITH RECURSIVE k(id) AS (
                (SELECT gpu_id FROM gpu_hour_rollups WHERE workspace_id = %(ws)s
                 ORDER BY gpu_id LIMIT 1)
                UNION ALL
                SELECT (SELECT gpu_id FROM gpu_hour_rollups
                        WHERE workspace_id = %(ws)s AND gpu_id > k.id
                        ORDER BY gpu_id LIMIT 1)
                FROM k WHERE k.id IS NOT NULL
            )
            SELECT id FROM k WHERE id IS NOT NULL
        ) AS rolled_up
    """,
    "host": """
        SELECT id FROM hosts WHERE workspace_id = %(ws)s
        UNION
        SELECT id FROM (
            WITH RECURSIVE k(id) AS (
                (SELECT host_id FROM host_hour_rollups WHERE workspace_id = %(ws)s
                 ORDER BY host_id LIMIT 1)
                UNION ALL
                SELECT (SELECT host_id FROM host_hour_rollups
                        WHERE workspace_id = %(ws)s AND host_id > k.id
                        ORDER BY host_id LIMIT 1)
                FROM k WHERE k.id IS NOT NULL
            )
            SELECT id FROM k WHERE id IS NOT NULL
        ) AS rolled_up
    """,
}

_HOST_GPUS = "SELECT id FROM gpus WHERE workspace_id = %(ws)s AND host_id = %(host)s"


async def ordered_keys(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, group: str, host_id: int | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """Every GPU (or host) the workspace has, or has rollups of (a deleted one too), with
    its key fields, in the reports' name order. A short index skip-scan, not a read of
    the rows: a key without rows in the window simply contributes none.

    `host_id`: that host (a host page), or its GPUs; a GPU is one host's for as long as
    it exists, and its row goes only with its host's."""
    if host_id is not None and group == "host":
        ids = {host_id}
    else:
        statement = _HOST_GPUS if host_id is not None else _KNOWN_KEYS[group]
        cur = await conn.execute(statement, {"ws": workspace_id, "host": host_id})
        ids = {int(r[0]) for r in await cur.fetchall()}
    return await service.ordered_keys(conn, workspace_id, group, ids)


_USAGE_SQL = """
    WITH held AS (
        SELECT {select}, sum(held_us)::bigint AS held, sum(active_us)::bigint AS active,
               sum(idle_held_us)::bigint AS idle_held, sum(cost_n) AS cost_n{held_energy}
        FROM {user_source}
        GROUP BY {group}
        HAVING sum(held_us) <> 0 OR sum(active_us) <> 0 OR sum(idle_held_us) <> 0
    ){covered_cte}{outside_cte}
    SELECT {columns}, coalesce(held, 0), coalesce(active, 0), coalesce(idle_held, 0),
           {covered}, cost_n, {outside}, {energy}
    FROM held {covered_join} {outside_join}
    {order_joins}
    ORDER BY {order}
"""
_COVERED_CTE = """,
    covered AS (
        SELECT {select}, sum(covered_us)::bigint AS covered, {energy}
        FROM {gpu_source}
        GROUP BY {group}
        HAVING sum(covered_us) <> 0
    )"""
# Rows keyed by user: the time held outside any job of the holder (board.jobs).
_OUTSIDE_CTE = """,
    outside AS (
        SELECT {select}, sum(outside_us)::bigint AS outside
        FROM {outside_source}
        GROUP BY {group}
    )"""


def _outside_join(columns: tuple[str, ...]) -> str:
    """The outside CTE joined to the held rows by their key; a user without a team has
    team NULL on both sides (IS NOT DISTINCT FROM), every other key column is never NULL
    (plain equality, so the join may hash)."""
    renamed = ", ".join(f"{c} AS o_{c}" for c in columns)
    on = " AND ".join(
        f"held.{c} IS NOT DISTINCT FROM o.o_{c}" if c == "team" else f"held.{c} = o.o_{c}"
        for c in columns
    )
    return f"LEFT JOIN (SELECT {renamed}, outside FROM outside) AS o ON {on}"


def _usage_sql(
    keys: tuple[str, ...],
    columns: tuple[str, ...],
    with_covered: bool,
    pricing: Pricing,
    rated: bool,
    moved: bool = False,
) -> str:
    """Per key: held, active and idle-held (and covered) microseconds, the cost
    numerator, the µs outside any job (keyed by user; else 0) and the energy sums (the
    GPUs' with covered time, else the users'), in body order. `moved`: the scope moves
    hours (repository.rollup_rows)."""
    select, group = repo.select_columns(columns)
    order: list[str] = []
    joins: list[str] = []
    for key in keys:
        if key == "user":
            order.append('linux_user COLLATE "C"')
        elif key == "team":
            order.append('team COLLATE "C" NULLS LAST')
        elif key in ("day", "month"):
            order.append(key)
        else:
            # A key's place in the name order (service.ordered_keys); ids as a tiebreak.
            column = "gpu_id" if key == "gpu" else "host_id"
            joins.append(
                f"LEFT JOIN unnest(%({key}_ids)s::bigint[], %({key}_ords)s::int[]) "
                f"AS {key}_order(id, ord) ON {key}_order.id = {column}"
            )
            order += [f"{key}_order.ord", column]
    source = "gpu" if with_covered else "user"
    energy = named_energy_sql(source, rated)
    with_outside = "user" in keys
    return _USAGE_SQL.format(
        select=select,
        group=group,
        user_source=repo.user_source(
            columns, pricing, rated and not with_covered, energy=not with_covered, moved=moved
        ),
        held_energy="" if with_covered else f", {energy}",
        covered_cte=_COVERED_CTE.format(
            select=select,
            gpu_source=repo.gpu_energy_source(columns, rated, moved),
            group=group,
            energy=energy,
        )
        if with_covered
        else "",
        columns=", ".join(columns),
        covered="coalesce(covered, 0)" if with_covered else "0",
        outside_cte=_OUTSIDE_CTE.format(
            select=select, outside_source=repo.outside_source(columns), group=group
        )
        if with_outside
        else "",
        outside="coalesce(outside, 0)" if with_outside else "0",
        outside_join=_outside_join(columns) if with_outside else "",
        # Rows only one side of the FULL JOIN has: no energy rather than NULL.
        energy=", ".join(
            f"coalesce({c}, 0)" if i < 4 else c for i, c in enumerate(energy_columns(rated))
        ),
        covered_join=f"FULL JOIN covered USING ({', '.join(columns)})" if with_covered else "",
        order_joins="\n".join(joins),
        order=", ".join(order),
    )


async def _batches(
    conn: psycopg.AsyncConnection[Any], statement: str, values: dict[str, Any]
) -> AsyncIterator[list[tuple[Any, ...]]]:
    """The statement's rows, FETCH_ROWS at a time, streamed (libpq's chunked rows) rather
    than read from a cursor: PostgreSQL plans a cursor's query without parallel workers,
    and a streamed statement may sum the rollups with them (benchmarks.md, "reports'
    unions"). A batch is taken off the connection before the next is read, so memory
    stays one batch whatever the window; leaving early cancels the statement."""
    batch: list[tuple[Any, ...]] = []
    async for row in conn.cursor().stream(statement, values, size=FETCH_ROWS):
        batch.append(row)
        if len(batch) == FETCH_ROWS:
            yield batch
            batch = []
    if batch:
        yield batch


KEY_COLUMN = {"user": "linux_user", "team": "team", "host": "host_id", "gpu": "gpu_id"}


def _alone(value: object) -> tuple[object, ...]:
    return (value,)


def _named(table: dict[int, dict[str, Any]], key: str) -> Callable[[int], tuple[Any, ...]]:
    """A host's or GPU's key fields by id (as key_values finds them)."""
    gone = tuple(DELETED[key].values())

    def fields(key_id: int) -> tuple[Any, ...]:
        found = table.get(key_id)
        return tuple(found.values()) if found else gone

    return fields


async def prepare_usage(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    window: Window,
    keys: tuple[str, ...],
    fmt: str,
) -> Chunks:
    """The usage report's body (service.usage_report's JSON or CSV bytes) as chunks."""
    scope = await service.usage_scope(
        conn,
        workspace_id,
        window,
        day_keyed="day" in keys,
        month_keyed="month" in keys,
        move_hours=True,
    )
    columns = service.unique([c for k in keys for c in service.KEY_COLUMNS[k]])
    with_covered = not {"user", "team"} & set(keys)
    with_outside = "user" in keys
    currency = await workspace_currency(conn, workspace_id)
    code = currency.code if currency else None
    pricing = await window_pricing(conn, workspace_id, window.start, window.end)
    values = scope.params()
    names: dict[str, dict[int, dict[str, Any]]] = {}
    for key in ("host", "gpu"):
        if key in keys:
            ordered = await ordered_keys(conn, workspace_id, key)
            names[key] = dict(ordered)
            values[f"{key}_ids"] = [key_id for key_id, _ in ordered]
            values[f"{key}_ords"] = list(range(len(ordered)))
    fields = service.unique([f for k in keys for f in service.KEY_FIELDS[k]])
    out_columns = (
        fields
        + service.USAGE_FIGURES
        + (("coveredGpuHours",) if with_covered else ())
        + service.COST_FIGURES
        + ENERGY_FIGURES
        + (service.OUTSIDE_FIGURES if with_outside else ())
    )
    position = {c: i for i, c in enumerate(columns)}

    def key_values(row: tuple[Any, ...]) -> tuple[Any, ...]:
        found: dict[str, Any] = {}
        if "linux_user" in position:
            found["user"] = row[position["linux_user"]]
        if "team" in position:
            found["team"] = row[position["team"]]
        for key, column in (("host", "host_id"), ("gpu", "gpu_id")):
            if key in names:
                found.update(names[key].get(row[position[column]]) or DELETED[key])
        if "day" in position:
            day: date = row[position["day"]]
            found["day"] = day.isoformat()
        if "month" in position:
            found["month"] = service.month_text(row[position["month"]])
        return tuple(found[f] for f in fields)

    with service.zone_known_to_database(window):
        # The zone is the one thing only the database can refuse: checked here, so the
        # aggregate itself can run after the head has left.
        await conn.execute("SELECT now() AT TIME ZONE %s", [window.tz_name])
    head = service.usage_head(window, keys)

    # CSV: each key's cells written once (board.reports.csv_figures); with both host and
    # gpu, the GPU's fields hold its host's.
    key_texts: list[KeyText] = []
    for key in keys:
        if key in ("user", "team"):
            key_texts.append(cached_key(position[KEY_COLUMN[key]], _alone))
        elif key == "day":
            key_texts.append(day_key(position["day"]))
        elif key == "month":
            key_texts.append(month_key(position["month"]))
        elif key == "gpu" or "gpu" not in keys:
            key_texts.append(cached_key(position[KEY_COLUMN[key]], _named(names[key], key)))

    rated = scope.rates.in_force
    code_cell = code or ""

    def csv_lines(rows: list[tuple[Any, ...]]) -> bytes:
        """Rows as the lines the CSV writer gives the buffered report's rows. Hours and
        kWh are reportkit.figures.hours and pricing.energy.kwh written out inline (a
        90,000-row body calls them 540,000 times); a rated row goes the general way."""
        width = len(columns)
        lines: list[str] = []
        append = lines.append
        unit, half = _US_PER_MICRO_HOUR, _US_PER_MICRO_HOUR // 2
        micro_kwh, half_kwh = UWS_PER_MICRO_KWH, UWS_PER_MICRO_KWH // 2
        for row in rows:
            held, active, idle_held, covered, cost_n = row[width : width + 5]
            share = "" if held == 0 else f"{round(1e6 * idle_held / held) / 1e6:.6f}"
            cells = (
                f"{(held + half) // unit / 1e6:.6f},{(active + half) // unit / 1e6:.6f},"
                f"{(idle_held + half) // unit / 1e6:.6f},{share}"
            )
            if with_covered:
                cells += f",{(covered + half) // unit / 1e6:.6f}"
            # Money with the currency's own digits ("19.22"), as statements.
            money = amount_text(exact(cost_n), currency) if currency else ""
            sums = row[width + 6 :]
            if rated:
                energy = ",".join(
                    [six(v) for v in service.energy_fields(energy_sums(sums), currency, True)]
                )
            else:  # nothing rated: no cost, no CO2e (energy_fields' figures, inline)
                e_covered, e_active, e_idle_held, e_idle = (int(v) for v in sums[:4])
                energy = (
                    f"{(e_active + e_idle_held + e_idle + half_kwh) // micro_kwh / 1e6:.6f},"
                    f"{(e_active + half_kwh) // micro_kwh / 1e6:.6f},"
                    f"{(e_idle_held + half_kwh) // micro_kwh / 1e6:.6f},"
                    f"{(e_covered + half) // unit / 1e6:.6f},,"
                )
            if with_outside:
                energy += f",{(row[width + 5] + half) // unit / 1e6:.6f}"
            keyed = ",".join([text(row) for text in key_texts])
            append(f"{keyed},{cells},{money},{code_cell},{energy}{LINE_END}")
        return "".join(lines).encode()

    async def chunks() -> Chunks:
        held_total = active_total = idle_total = cost_total = 0
        energy_total: Sequence[int] = NO_ENERGY
        width = len(columns)
        text = fmt != "json"
        yield (
            orjson.dumps(head.model_dump())[:-1] + b',"rows":['
            if fmt == "json"
            else (csv_cells(out_columns) + LINE_END).encode()
        )
        sent = False
        # PostgreSQL sums every row before it sorts and sends the first one: that time
        # is spent with the head already sent, not before the first byte.
        statement = _usage_sql(
            keys, columns, with_covered, pricing, scope.rates.in_force, bool(scope.moved)
        )
        async for rows in _batches(conn, statement, values):
            if text:
                # CSV: no totals to keep, figures written from their integers.
                yield csv_lines(rows)
                continue
            built = []
            energies = []
            for row in rows:
                held, active, idle_held, covered, cost_n = row[width : width + 5]
                energy = energy_sums(row[width + 6 :])
                energies.append(energy)
                cost = exact(cost_n)
                cost_total += cost
                held_total += held
                active_total += active
                idle_total += idle_held
                figures: tuple[float | str | None, ...] = (
                    service.hours(held),
                    service.hours(active),
                    service.hours(idle_held),
                    service.ratio(idle_held, held),
                )
                if with_covered:
                    figures += (service.hours(covered),)
                figures += (
                    amount(cost, currency),
                    code,
                    *service.energy_fields(energy, currency),
                )
                if with_outside:
                    figures += (service.hours(row[width + 5]),)
                built.append(key_values(row) + figures)
            energy_total = summed(energy_total, energies)
            body = orjson.dumps([dict(zip(out_columns, r, strict=True)) for r in built])
            yield (b"," if sent else b"") + body[1:-1]
            sent = True
        if fmt == "json":
            totals = service.usage_totals(
                (held_total, active_total, idle_total, cost_total), energy_total, currency
            )
            coverage = await service.report_coverage(conn, scope, window)
            yield (
                b'],"totals":'
                + orjson.dumps(totals.model_dump())
                + b',"coverage":'
                + orjson.dumps(coverage.model_dump())
                + b"}"
            )

    return chunks()
