"""The utilization report, its rows rendered by PostgreSQL and streamed: the one path
of the API and the pages (the host page charts this body, parsed).

A 90-day per-GPU report is 90,000 rows (27 MiB of JSON); PostgreSQL writes each row as
JSON or CSV text (board.reports.utilization_sql), Python only puts the pieces together.
Rows are in key name order, then time; each key's time axis is cut into the pieces of
bodies.plan: a kept block is sent as its deflated segment (board.reports.bodies says when
that is right), anything else is rendered live, and a block rendered live is deflated
and kept for the next report. Every row's text starts with the row separator, so pieces
join as they are; the JSON body's first row loses its comma.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format

from board.reportkit import deflated
from board.reportkit.csv import LINE_END, csv_cells
from board.reportkit.deflated import Deflated
from board.reportkit.params import Window
from board.reportkit.streaming import plain
from board.reports import bodies, service, utilization_sql
from board.reports import repository as repo
from board.reports.stream import ordered_keys
from board.reports.utilization_sql import JSON_ROW_START

# Live rows per query (keys taken in order until it or KEPT_BYTES of their kept
# segments are reached) and per fetch: a few MiB in the worker at a time.
BATCH_ROWS = 10_000
FETCH_ROWS = 2_000
KEPT_BYTES = 2 << 20

Part = bytes | Deflated
Parts = AsyncIterator[Part]


class _Utf8Bytes(Loader):
    """Text as its UTF-8 bytes: the rendered rows go into the body as they are."""

    format = Format.BINARY

    def load(self, data: Buffer) -> bytes:
        return bytes(data)


def _live_sql(group: str, bucket: str, fmt: str, one_host: bool) -> str:
    """The rows of the asked (key, piece) pairs, in body order, tagged with both."""
    figures = utilization_sql.utilization_figures_sql(group, bucket, one_host, keyed=True)
    return f"""
        SELECT k.ord, n.idx, {utilization_sql.row_text_sql(fmt)}, f.covered_us
        FROM ({figures}) AS f
        JOIN unnest(%(keys)s::bigint[], %(ords)s::int[], %(prefixes)s::text[])
             AS k(id, ord, prefix) ON k.id = f.key
        JOIN unnest(%(need_keys)s::bigint[], %(need_pieces)s::int[]) AS n(key, idx)
          ON n.key = f.key
        JOIN unnest(%(piece_nos)s::int[], %(piece_los)s::timestamptz[],
                    %(piece_his)s::timestamptz[]) AS p(idx, lo, hi)
          ON p.idx = n.idx AND f.bucket >= p.lo AND (p.hi IS NULL OR f.bucket < p.hi)
        JOIN unnest(%(starts)s::timestamptz[], %(labels)s::text[]) AS lb(start, label)
          ON lb.start = f.bucket
        ORDER BY k.ord, f.bucket
    """


async def _hour_buckets(
    conn: psycopg.AsyncConnection[Any], scope: repo.Scope, bucket: str
) -> list[tuple[datetime, datetime]]:
    """(hour, its bucket's start) for every hour of the window and the hour after it,
    by the expression the rows are bucketed with."""
    cur = await conn.execute(
        f"""
        SELECT h, {utilization_sql.hour_bucket_sql(bucket, "h")}
        FROM generate_series(%(start)s::timestamptz, %(end)s::timestamptz,
                             interval '1 hour') AS h
        ORDER BY h
        """,
        scope.params(),
        binary=True,  # thousands of timestamps: binary ones load several times faster
    )
    rows = await cur.fetchall()
    return [(r[0], r[1]) for r in rows]


class _LiveRows:
    """A live query's rows taken a (key, piece) at a time, fetched FETCH_ROWS at once."""

    def __init__(self, cur: psycopg.AsyncCursor[Any]) -> None:
        self.cur = cur
        self.rows: list[Any] = []
        self.at = 0
        self.done = False

    async def take(self, ordinal: int, piece: int) -> tuple[bytes, int]:
        """The rows' text and their covered microseconds."""
        parts = []
        covered = 0
        while True:
            if self.at == len(self.rows):
                if self.done:
                    break
                self.rows = await self.cur.fetchmany(FETCH_ROWS)
                self.at = 0
                if not self.rows:
                    self.done = True
                    break
            row = self.rows[self.at]
            if row[0] != ordinal or row[1] != piece:
                break
            parts.append(row[2])
            covered += row[3]
            self.at += 1
        return b"".join(parts), covered


async def prepare_utilization(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    window: Window,
    group: str,
    bucket: str,
    fmt: str,
    connect: Callable[[], Any] | None = None,
    host_id: int | None = None,
) -> Parts:
    """The utilization report's body as parts: text, or kept deflated segments.
    `connect`: a new autocommit connection on which blocks rendered live are kept.
    `host_id`: only that host's GPUs (or itself), as a host page charts them."""
    scope = await service.utilization_scope(conn, workspace_id, window, bucket, host_id)
    with service.zone_known_to_database(window):
        hours = await _hour_buckets(conn, scope, bucket)
    labels: dict[datetime, str] = {}
    for _, start in hours[:-1]:
        if start not in labels:
            label = window.local(start).isoformat()
            labels[start] = orjson.dumps(label).decode() if fmt == "json" else csv_cells((label,))
    keys = await ordered_keys(conn, workspace_id, group, host_id)
    prefixes = []
    for _, fields in keys:
        if fmt == "json":
            prefixes.append(orjson.dumps(fields)[:-1] + b"," + JSON_ROW_START[1:])
        else:
            prefixes.append((csv_cells(fields.values()) + ",").encode())
    keyed = [(key_id, prefix) for (key_id, _), prefix in zip(keys, prefixes, strict=True)]

    report = f"{bodies.KEPT_KIND}:{group}:{bucket}:{fmt}:{window.tz_name}"
    dirty, versions = await bodies.day_states(conn, workspace_id, window)
    pieces = bodies.plan(window, bucket, hours, dirty, versions, datetime.now(UTC))
    blocks = [p for p in pieces if p.units]
    starts = sorted(labels)
    rows_in = [sum(1 for s in starts if p.lo <= s and (p.hi is None or s < p.hi)) for p in pieces]
    always_live = sum(rows for p, rows in zip(pieces, rows_in, strict=True) if not p.units)
    head = service.utilization_head(window, group, bucket)
    columns = service.KEY_FIELDS[group] + service.UTILIZATION_FIGURES
    if fmt == "json":
        first = orjson.dumps(head.model_dump())[:-1] + b',"rows":['
    else:
        # Every row starts with its line end; the body ends with one.
        first = csv_cells(columns).encode()
    statement = _live_sql(group, bucket, fmt, host_id is not None)
    values = {
        **scope.params(),
        "starts": starts,
        "labels": [labels[s] for s in starts],
        "piece_nos": list(range(len(pieces))),
        "piece_los": [p.lo for p in pieces],
        "piece_his": [p.hi for p in pieces],
    }

    async def parts() -> Parts:
        yield first
        keeper = bodies.Keeper(connect, workspace_id, report) if connect else None
        reader = bodies.KeptReader(conn, bucket)
        stripped = fmt != "json"
        # The coverage total: every row's covered time, kept or live (no second read).
        covered = 0
        try:
            await reader.open(workspace_id, report, prefixes, [k for k, _ in keyed], blocks)
            # Keys are taken in order with their kept segments until their live rows or
            # kept bytes fill a batch; then one query renders the batch's live pieces.
            batch: list[tuple[int, dict[int, Deflated]]] = []
            live_rows = kept_bytes = 0
            for i in range(len(keyed)):
                found = await reader.take(i)
                batch.append((i, found))
                kept_bytes += sum(len(d.data) for d in found.values())
                live_rows += (
                    always_live
                    if len(found) == len(blocks)
                    else sum(
                        rows
                        for piece, rows in zip(pieces, rows_in, strict=True)
                        if not (piece.units and piece.units[0] in found)
                    )
                )
                if i + 1 < len(keyed) and live_rows < BATCH_ROWS and kept_bytes < KEPT_BYTES:
                    continue
                needs = [
                    (keyed[k][0], j)
                    for k, segments in batch
                    for j, p in enumerate(pieces)
                    if not (p.units and p.units[0] in segments)
                ]
                live = await _live(conn, statement, values, [k for k, _ in batch], keyed, needs)
                run: list[Deflated] = []
                for k, segments in batch:
                    key_id, prefix = keyed[k]
                    for j, piece in enumerate(pieces):
                        kept = segments.get(piece.units[0]) if piece.units else None
                        part: Part
                        if kept is not None:
                            part = kept
                            covered += kept.covered
                        else:
                            assert live is not None
                            part, part_covered = await live.take(k, j)
                            covered += part_covered
                            if keeper is not None and piece.units:
                                # Kept, and sent as kept: compressed once, not twice.
                                part = deflated.deflate(part, part_covered)
                                await keeper.add(key_id, prefix, piece, part)
                        if not (part.size if isinstance(part, Deflated) else part):
                            continue
                        if not stripped:
                            # The body's first row: no comma before it.
                            text = deflated.inflate(part) if isinstance(part, Deflated) else part
                            part = text[1:]
                            stripped = True
                        if isinstance(part, Deflated):
                            # Kept segments in a row go out as one (fewer, larger parts).
                            run.append(part)
                            continue
                        if run:
                            yield deflated.joined(run)
                            run = []
                        yield part
                if run:
                    yield deflated.joined(run)
                    run = []
                batch = []
                live_rows = kept_bytes = 0
            if keeper is not None:
                await keeper.flush()
        finally:
            try:
                await reader.close()
            finally:
                if keeper is not None:
                    await keeper.close()
        if fmt == "json":
            coverage = await service.report_coverage(conn, scope, window, covered)
            yield b'],"coverage":' + orjson.dumps(coverage.model_dump()) + b"}"
        else:
            yield LINE_END.encode()

    return parts()


async def utilization_body(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    window: Window,
    group: str,
    bucket: str,
    fmt: str,
    host_id: int | None = None,
) -> bytes:
    """The whole body as the API sends it (without gzip), kept blocks read, none kept:
    what a page charts (its JSON, parsed)."""
    parts = await prepare_utilization(conn, workspace_id, window, group, bucket, fmt, None, host_id)
    return b"".join([chunk async for chunk in plain(parts)])


async def _live(
    conn: psycopg.AsyncConnection[Any],
    statement: str,
    values: dict[str, Any],
    batch: Sequence[int],
    keyed: Sequence[tuple[int, bytes]],
    needs: Sequence[tuple[int, int]],
) -> _LiveRows | None:
    if not needs:
        return None
    wanted = sorted({key for key, _ in needs})
    ordinal = {keyed[i][0]: i for i in batch}
    values = {
        **values,
        "keys": wanted,
        "ords": [ordinal[k] for k in wanted],
        "prefixes": [keyed[ordinal[k]][1].decode() for k in wanted],
        "need_keys": [k for k, _ in needs],
        "need_pieces": [j for _, j in needs],
    }
    cur = conn.cursor(binary=True)
    cur.adapters.register_loader("text", _Utf8Bytes)
    await cur.execute(statement, values)
    return _LiveRows(cur)
