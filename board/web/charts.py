"""Geometry for the inline SVG charts: the templates draw what these functions measure.

Inline SVG keeps the board a single offline package (no chart library, no CDN) and
needs no script to show the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

# Plot area inside a viewBox of WIDTH x HEIGHT; room on the left and below for labels.
WIDTH = 480
HEIGHT = 220
LEFT = 48
RIGHT = 12
TOP = 12
BOTTOM = 30
SERIES_CLASSES = 6


@dataclass(frozen=True)
class Line:
    label: str
    css: str
    path: str
    dots: list[tuple[float, float, str]]


@dataclass
class LineChart:
    title: str
    width: int = WIDTH
    height: int = HEIGHT
    lines: list[Line] = field(default_factory=list)
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    plot: tuple[float, float, float, float] = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)

    @property
    def empty(self) -> bool:
        return not any(line.dots for line in self.lines)


def percent_chart(
    title: str,
    start: datetime,
    end: datetime,
    series: dict[str, list[tuple[datetime, float | None]]],
    step: timedelta = timedelta(hours=1),
    label_hours: int = 6,
) -> LineChart:
    """Lines of 0–100 % values per series at the middle of each bucket; gaps break a line."""
    x0, y0, x1, y1 = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    span = (end - start).total_seconds() or 1.0

    def x(at: datetime) -> float:
        return round(x0 + (x1 - x0) * (at - start).total_seconds() / span, 1)

    def y(value: float) -> float:
        return round(y1 - (y1 - y0) * max(0.0, min(100.0, value)) / 100.0, 1)

    chart = LineChart(title=title)
    for pct in (0, 25, 50, 75, 100):
        chart.y_ticks.append((y(pct), f"{pct}%"))
    moment = start
    while moment <= end:
        if moment.hour % label_hours == 0:
            chart.x_ticks.append((x(moment), moment.strftime("%H:%M")))
        moment += step
    for n, (label, points) in enumerate(series.items()):
        parts: list[str] = []
        dots: list[tuple[float, float, str]] = []
        pen_up = True
        expected: datetime | None = None
        for at, value in sorted(points, key=lambda p: p[0]):
            if value is None or (expected is not None and at != expected):
                pen_up = True
            if value is not None:
                px, py = x(at + step / 2), y(value)
                parts.append(f"{'M' if pen_up else 'L'}{px},{py}")
                dots.append((px, py, f"{label} {at.strftime('%H:%M')}: {value:.0f} %"))
                pen_up = False
            expected = at + step
        chart.lines.append(Line(label, f"series-{n % SERIES_CLASSES}", " ".join(parts), dots))
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
