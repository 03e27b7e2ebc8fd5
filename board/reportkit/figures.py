"""How reports write time: integer microseconds summed exactly, then hours with six
decimals (rounded half up in integer arithmetic), and shares with six decimals. The
usage, jobs and other reports all use these, so the same microseconds read the same."""

from __future__ import annotations

# An hour in microseconds (board.rollups.crediting credits integer µs per UTC hour).
HOUR_US = 3_600_000_000


def hours(us: int) -> float:
    """Microseconds as hours with 6 decimals, rounded half up in integer arithmetic."""
    return (us + HOUR_US // 2_000_000) // (HOUR_US // 1_000_000) / 1e6


def ratio(part: float, whole: float) -> float | None:
    """part / whole with 6 decimals; None when whole is 0."""
    return None if whole == 0 else round(1e6 * part / whole) / 1e6
