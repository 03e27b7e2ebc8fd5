"""The host page's history charts: a range from the URL (6 h, 24 h, 7 d, 30 d), read from
the raw samples for the short ranges and from the hourly rollups for the long ones."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.fleet.history import recent_averages
from board.reportkit.params import parse_window, parse_zone
from board.reports.utilization_stream import utilization_body
from board.web.charts import percent_chart, series_class


@dataclass(frozen=True)
class ChartRange:
    key: str
    label: str
    span: timedelta
    # The bucket of each point; None: hourly rollups (the utilization report).
    raw_step: timedelta | None

    @property
    def resolution(self) -> str:
        if self.raw_step is None:
            return "hourly averages"
        return f"{int(self.raw_step.total_seconds() // 60)}-minute averages"


RANGES = {
    r.key: r
    for r in (
        ChartRange("6h", "6 h", timedelta(hours=6), timedelta(minutes=5)),
        ChartRange("24h", "24 h", timedelta(hours=24), timedelta(minutes=15)),
        ChartRange("7d", "7 d", timedelta(days=7), None),
        ChartRange("30d", "30 d", timedelta(days=30), None),
    )
}
DEFAULT_RANGE = "24h"

Series = dict[str, list[tuple[datetime, float | None]]]


def chart_range(key: str) -> ChartRange:
    """The range a URL names; anything else is the default (a link never breaks)."""
    return RANGES.get(key, RANGES[DEFAULT_RANGE])


def _window_end(now: datetime, step: timedelta) -> datetime:
    """The end of the bucket `now` is in, on the UTC epoch grid of `step`."""
    seconds = int(step.total_seconds())
    epoch = int(now.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds + seconds, UTC)


async def host_history(
    db: AsyncSession,
    workspace_id: int,
    tz_name: str,
    host_key: int,
    range_key: str,
    gpu_indexes: list[int],
) -> dict[str, Any]:
    """The utilization and memory charts of one host over the range, per GPU.

    `gpu_indexes`: the host's GPUs now; with those in the history they fix each GPU's
    colour (its position by index), which the live chart reuses (`series_css`)."""
    chosen = chart_range(range_key)
    step = chosen.raw_step or timedelta(hours=1)
    end = _window_end(datetime.now(UTC), step)
    start = end - chosen.span
    tz_shown, zone = parse_zone(tz_name)
    util: Series = {}
    memory: Series = {}
    if chosen.raw_step is not None:
        for b in await recent_averages(db, workspace_id, host_key, start, end, step):
            util.setdefault(f"GPU {b.gpu_index}", []).append((b.start, b.util_pct))
            memory.setdefault(f"GPU {b.gpu_index}", []).append((b.start, b.memory_used_pct))
    else:
        window = parse_window(start.isoformat(), end.isoformat(), tz_name)
        # The API's report of this host's GPUs, its JSON body parsed: one rendering.
        body = await utilization_body(
            await report_connection(db), workspace_id, window, "gpu", "hour", "json", host_key
        )
        rows = orjson.loads(body)["rows"]
        for r in sorted(rows, key=lambda r: (r["gpuIndex"] or 0, r["bucketStart"])):
            label = f"GPU {r['gpuIndex']}"
            at = datetime.fromisoformat(r["bucketStart"])
            util.setdefault(label, []).append((at, r["avgUtilPct"]))
            memory.setdefault(label, []).append((at, r["avgMemoryUsedPct"]))
    # Every GPU in both charts, in index order, so a GPU has one colour everywhere.
    now_labels = {f"GPU {i}" for i in gpu_indexes}
    labels = sorted(set(util) | set(memory) | now_labels, key=lambda s: int(s.split()[-1]))
    util = {k: util.get(k, []) for k in labels}
    memory = {k: memory.get(k, []) for k in labels}
    shown = chosen.resolution
    return {
        "util_chart": percent_chart("Utilization", start, end, zone, util, step, shown),
        "memory_chart": percent_chart("Memory used", start, end, zone, memory, step, shown),
        "tz": tz_shown,
        "series_css": {label: series_class(n) for n, label in enumerate(labels)},
        "chart_range": chosen,
        "ranges": RANGES,
    }
