"""Maintenance windows' occurrences: once, or every day or week at the same local times.

A recurring window repeats the wall-clock start and end of its first occurrence in its
zone, not a fixed number of hours: "every night 01:00-05:00 in Europe/Berlin" is 01:00
to 05:00 local on the night the clocks change too (3 or 5 real hours that night). A
wall time the clocks skip (02:30 on a spring-forward night) is read with the offset
before the change, i.e. the same instant as 03:30 after it; a wall time that happens
twice (the autumn night) is its first instance. Pure functions, no database.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from board.zones import iana_zone

PERIODS = {"daily": timedelta(days=1), "weekly": timedelta(days=7)}
RECURRENCES = ("none", *PERIODS)


@dataclass(frozen=True)
class WindowRule:
    """A window as stored: its first occurrence, how it repeats, in which zone, until when."""

    host_id: int
    public_id: str
    starts_at: datetime
    ends_at: datetime
    recurrence: str
    zone: str
    until: datetime | None
    note: str


@dataclass(frozen=True)
class Occurrence:
    """One run of a window: [start, end) in UTC."""

    rule: WindowRule
    start: datetime
    end: datetime

    @property
    def host_id(self) -> int:
        return self.rule.host_id


def _instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """A naive local wall time as an instant (fold 0: the first of a repeated hour; a
    skipped one keeps the offset before the change)."""
    return wall.replace(tzinfo=zone, fold=0).astimezone(UTC)


def occurrences(rule: WindowRule, lo: datetime, hi: datetime) -> list[Occurrence]:
    """The rule's occurrences that overlap [lo, hi), by start."""
    if rule.recurrence not in PERIODS:
        if rule.starts_at < hi and rule.ends_at > lo:
            return [Occurrence(rule, rule.starts_at.astimezone(UTC), rule.ends_at.astimezone(UTC))]
        return []
    period = PERIODS[rule.recurrence]
    zone = iana_zone(rule.zone)
    first_start = rule.starts_at.astimezone(zone).replace(tzinfo=None)
    first_end = rule.ends_at.astimezone(zone).replace(tzinfo=None)
    # A step of the period moves an occurrence by at most a day's DST change in real
    # time, so start a step early and stop a step late, and keep what overlaps.
    first = max(0, (lo - rule.starts_at) // period - 1)
    last = (hi - rule.starts_at) // period + 1
    found: list[Occurrence] = []
    for k in range(first, last + 1):
        start = _instant(first_start + k * period, zone)
        if rule.until is not None and start >= rule.until:
            break
        end = _instant(first_end + k * period, zone)
        if start < hi and end > lo and end > start:
            found.append(Occurrence(rule, start, end))
    return found


def in_force(rules: Iterable[WindowRule], at: datetime) -> dict[int, Occurrence]:
    """host id -> the occurrence in force at `at` (the one ending last where several are)."""
    found: dict[int, Occurrence] = {}
    for rule in rules:
        for occurrence in occurrences(rule, at, at + timedelta(microseconds=1)):
            kept = found.get(rule.host_id)
            if kept is None or occurrence.end > kept.end:
                found[rule.host_id] = occurrence
    return found


def overlapping(rules: Iterable[WindowRule], lo: datetime, hi: datetime) -> list[Occurrence]:
    """Every occurrence overlapping [lo, hi), by start then host."""
    found = [o for rule in rules for o in occurrences(rule, lo, hi)]
    return sorted(found, key=lambda o: (o.start, o.host_id, o.rule.public_id))


def next_occurrence(rule: WindowRule, after: datetime) -> Occurrence | None:
    """The occurrence in force at `after`, or the next one to start."""
    # A recurring window runs at least once a week from its first start on.
    upcoming = occurrences(rule, after, max(after, rule.starts_at) + timedelta(days=8))
    return upcoming[0] if upcoming else None
