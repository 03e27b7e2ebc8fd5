"""Geometry for the inline SVG charts: the templates draw what these functions measure.

Inline SVG keeps the board a single offline package (no chart library, no CDN) and
needs no script to show the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo

# Plot area inside a viewBox of WIDTH x HEIGHT; room on the left and below for labels.
WIDTH = 480
HEIGHT = 220
LEFT = 48
RIGHT = 12
TOP = 12
BOTTOM = 30
# One colour per GPU up to 16 (board.css .series-0 … .series-15, each at least 3:1
# against the chart's background); the second eight are also dashed.
SERIES_CLASSES = 16
# Above this many points a line is drawn without a dot (and a tooltip) per point.
MAX_DOTS = 60


def series_class(n: int) -> str:
    return f"series-{n % SERIES_CLASSES}"


@dataclass(frozen=True)
class Line:
    label: str
    css: str
    path: str
    dots: list[tuple[float, float, str]]
    points: int = 0


@dataclass
class LineChart:
    title: str
    width: int = WIDTH
    height: int = HEIGHT
    lines: list[Line] = field(default_factory=list)
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    plot: tuple[float, float, float, float] = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)
    # "hourly averages" or "5-minute averages", for the chart's accessible name.
    resolution: str = ""

    @property
    def empty(self) -> bool:
        return not any(line.points for line in self.lines)


@dataclass(frozen=True)
class TimeAxis:
    """Where labelled ticks go: every `hours` hours of local time, or every `days` days
    at local midnight, with a strftime label."""

    hours: int = 0
    days: int = 0
    label: str = "%H:%M"

    def wants(self, local: datetime) -> bool:
        if local.minute or local.second:
            return False
        if self.days:
            return local.hour == 0 and local.toordinal() % self.days == 0
        return local.hour % self.hours == 0


def axis_for(span: timedelta) -> TimeAxis:
    """Tick spacing that keeps 5 to 8 labels on the chart at any width."""
    if span <= timedelta(hours=8):
        return TimeAxis(hours=1)
    if span <= timedelta(hours=30):
        return TimeAxis(hours=4)
    if span <= timedelta(days=8):
        return TimeAxis(days=1, label="%a %d")
    return TimeAxis(days=5, label="%d %b")


def time_ticks(start: datetime, end: datetime, tz: tzinfo, axis: TimeAxis) -> list[datetime]:
    """The UTC instants in [start, end) whose local time the axis labels. Walks UTC in
    quarter hours, so DST changes and half-hour zones put ticks where clocks show them."""
    found: list[datetime] = []
    moment = start.replace(minute=(start.minute // 15) * 15, second=0, microsecond=0)
    while moment < end:
        if moment >= start and axis.wants(moment.astimezone(tz)):
            found.append(moment)
        moment += timedelta(minutes=15)
    return found


def percent_chart(
    title: str,
    start: datetime,
    end: datetime,
    tz: tzinfo,
    series: dict[str, list[tuple[datetime, float | None]]],
    step: timedelta = timedelta(hours=1),
    resolution: str = "hourly averages",
) -> LineChart:
    """Lines of 0–100 % values per series at the middle of each bucket; gaps break a line.

    `start`, `end` and the points' instants are aware datetimes (any zone; the arithmetic
    is done on real instants); tick labels and tooltips are in `tz`. Each series keeps its
    colour by position: the n-th series gets `series-n` here and on the live chart."""
    x0, y0, x1, y1 = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    span = (end - start).total_seconds() or 1.0

    def x(at: datetime) -> float:
        return round(x0 + (x1 - x0) * (at.astimezone(UTC) - start).total_seconds() / span, 1)

    def y(value: float) -> float:
        return round(y1 - (y1 - y0) * max(0.0, min(100.0, value)) / 100.0, 1)

    chart = LineChart(title=title, resolution=resolution)
    for pct in (0, 25, 50, 75, 100):
        chart.y_ticks.append((y(pct), f"{pct}%"))
    axis = axis_for(end - start)
    for moment in time_ticks(start, end, tz, axis):
        chart.x_ticks.append((x(moment), moment.astimezone(tz).strftime(axis.label)))
    tip = "%a %d %b %H:%M" if end - start > timedelta(hours=30) else "%H:%M"
    for n, (label, points) in enumerate(series.items()):
        parts: list[str] = []
        dots: list[tuple[float, float, str]] = []
        pen_up = True
        expected: datetime | None = None
        shown = sorted((p for p in points if p[1] is not None), key=lambda p: p[0])
        for at, value in sorted(points, key=lambda p: p[0]):
            if value is None or (expected is not None and at != expected):
                pen_up = True
            if value is not None:
                px, py = x(at + step / 2), y(value)
                parts.append(f"{'M' if pen_up else 'L'}{px},{py}")
                if len(shown) <= MAX_DOTS:
                    when = at.astimezone(tz).strftime(tip)
                    dots.append((px, py, f"{label} {when}: {value:.0f} %"))
                pen_up = False
            expected = at + step
        chart.lines.append(Line(label, series_class(n), " ".join(parts), dots, len(shown)))
    return chart


@dataclass(frozen=True)
class BarRow:
    label: str
    active: float
    idle_held: float
    share: float | None
    active_width: float
    idle_held_width: float


def stacked_bars(rows: list[tuple[str, float, float, float | None]]) -> list[BarRow]:
    """Rows of (label, active, idle-held, share) as widths in % of the largest total."""
    largest = max((a + i for _, a, i, _ in rows), default=0.0) or 1.0
    return [
        BarRow(
            label=label,
            active=active,
            idle_held=idle,
            share=share,
            active_width=round(100.0 * active / largest, 2),
            idle_held_width=round(100.0 * idle / largest, 2),
        )
        for label, active, idle, share in rows
    ]


@dataclass(frozen=True)
class DayColumn:
    day: str
    active: float
    idle_held: float
    x: float
    width: float
    active_y: float
    active_h: float
    idle_held_y: float
    idle_held_h: float


@dataclass
class DayChart:
    """GPU-hours per day as columns, active below idle-held, in a viewBox of WIDTH x HEIGHT."""

    columns: list[DayColumn]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]
    width: int = WIDTH
    height: int = HEIGHT
    plot: tuple[float, float, float, float] = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)


def _nice_top(value: float) -> float:
    """The smallest 1, 2 or 5 × 10ⁿ at or above value (at least 1)."""
    top = 1.0
    while top < value:
        for factor in (2.0, 2.5, 2.0):
            top *= factor
            if top >= value:
                break
    return top


def day_columns(days: list[tuple[str, float, float]]) -> DayChart:
    """Columns for (ISO day, active GPU-hours, idle-held GPU-hours), in day order; about
    eight labelled days whatever the window's length."""
    x0, y0, x1, y1 = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    top = _nice_top(max((a + i for _, a, i in days), default=0.0))

    def h(value: float) -> float:
        return round((y1 - y0) * value / top, 2)

    slot = (x1 - x0) / max(1, len(days))
    gap = min(2.0, slot * 0.2)
    every = max(1, -(-len(days) // 8))
    columns: list[DayColumn] = []
    x_ticks: list[tuple[float, str]] = []
    for n, (day, active, idle) in enumerate(days):
        x = round(x0 + n * slot + gap / 2, 2)
        ah, ih = h(active), h(idle)
        columns.append(
            DayColumn(day, active, idle, x, round(slot - gap, 2), y1 - ah, ah, y1 - ah - ih, ih)
        )
        if n % every == 0:
            x_ticks.append((round(x0 + (n + 0.5) * slot, 1), day[5:]))
    y_ticks = [(round(y1 - (y1 - y0) * f, 1), f"{top * f:g}") for f in (0, 0.25, 0.5, 0.75, 1)]
    return DayChart(columns, y_ticks, x_ticks)
