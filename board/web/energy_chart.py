"""kWh per day on the usage page: the GPUs' own energy per day (the usage report grouped
by day: every state, idle included), its idle-held part drawn on top of the rest, and
the same figures as a table for those who do not see the chart."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from board.web.charts import DayChart, day_columns


@dataclass(frozen=True)
class EnergyDay:
    day: str
    energy_kwh: float
    idle_held_kwh: float
    # Some of the day's observed GPU time had no power reading.
    partial: bool

    @property
    def other_kwh(self) -> float:
        """Active GPUs and free ones: the energy that was not idle-held."""
        return max(0.0, self.energy_kwh - self.idle_held_kwh)


@dataclass(frozen=True)
class EnergyDays:
    chart: DayChart
    days: list[EnergyDay]

    @property
    def partial(self) -> bool:
        return any(d.partial for d in self.days)


def energy_days(rows: list[dict[str, Any]], first: date, last: date) -> EnergyDays | None:
    """Every day of [first, last] from the day-keyed report rows; None when no GPU
    reported power all window (an empty chart would read as 0 kWh)."""
    found = {str(r["day"]): r for r in rows}
    if not any((r.get("energyCoveredHours") or 0.0) > 0 for r in rows):
        return None
    days: list[EnergyDay] = []
    day = first
    while day <= last:
        row = found.get(day.isoformat())
        if row is None:
            days.append(EnergyDay(day.isoformat(), 0.0, 0.0, False))
        else:
            covered = float(row.get("coveredGpuHours") or 0.0)
            days.append(
                EnergyDay(
                    day.isoformat(),
                    float(row["energyKWh"]),
                    float(row["idleHeldEnergyKWh"]),
                    float(row["energyCoveredHours"]) < covered,
                )
            )
        day += timedelta(days=1)
    chart = day_columns([(d.day, d.other_kwh, d.idle_held_kwh) for d in days])
    return EnergyDays(chart, days)
