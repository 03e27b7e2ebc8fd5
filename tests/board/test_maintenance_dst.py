"""Maintenance windows' occurrences keep their local times across DST changes (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from board.health.windows import WindowRule, in_force, next_occurrence, occurrences


def rule(start: str, end: str, recurrence: str, zone: str, until: str | None = None) -> WindowRule:
    return WindowRule(
        host_id=1,
        public_id="w",
        starts_at=datetime.fromisoformat(start),
        ends_at=datetime.fromisoformat(end),
        recurrence=recurrence,
        zone=zone,
        until=datetime.fromisoformat(until) if until else None,
        note="",
    )


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def spans(found: list) -> list[tuple[str, str]]:
    return [(o.start.strftime("%m-%d %H:%M"), o.end.strftime("%m-%d %H:%M")) for o in found]


def test_daily_across_spring_forward_and_fall_back() -> None:
    # 01:00-03:00 every night in Berlin; the clocks go 02:00 -> 03:00 on 2027-03-28.
    nightly = rule(
        "2027-03-26T01:00:00+01:00", "2027-03-26T03:00:00+01:00", "daily", "Europe/Berlin"
    )
    found = occurrences(nightly, utc("2027-03-26T00:00"), utc("2027-03-30T00:00"))
    assert spans(found) == [
        ("03-26 00:00", "03-26 02:00"),  # CET: 2 h
        ("03-27 00:00", "03-27 02:00"),
        ("03-28 00:00", "03-28 01:00"),  # the change night: 01:00 CET to 03:00 CEST, 1 h
        ("03-28 23:00", "03-29 01:00"),  # CEST: the same local times, an hour earlier in UTC
        ("03-29 23:00", "03-30 01:00"),
    ]
    # And back on 2027-10-31 (03:00 CEST -> 02:00 CET): that night has 3 real hours.
    autumn = occurrences(nightly, utc("2027-10-30T00:00"), utc("2027-11-01T12:00"))
    assert spans(autumn) == [
        ("10-29 23:00", "10-30 01:00"),
        ("10-30 23:00", "10-31 02:00"),
        ("11-01 00:00", "11-01 02:00"),
    ]
    assert 1 in in_force([nightly], utc("2027-03-28T23:15"))
    assert 1 not in in_force([nightly], utc("2027-03-29T01:30"))


def test_weekly_in_new_york_a_skipped_wall_time_and_until() -> None:
    # Sundays 02:30-04:00 New York; 2027-03-14 02:30 does not exist (02:00 -> 03:00).
    sunday = rule(
        "2027-03-07T02:30:00-05:00",
        "2027-03-07T04:00:00-05:00",
        "weekly",
        "America/New_York",
        until="2027-03-22T00:00:00+00:00",
    )
    found = occurrences(sunday, utc("2027-03-01T00:00"), utc("2027-04-30T00:00"))
    assert spans(found) == [
        ("03-07 07:30", "03-07 09:00"),
        ("03-14 07:30", "03-14 08:00"),  # 02:30 is read as 03:30 EDT (the offset before)
        ("03-21 06:30", "03-21 08:00"),  # EDT; the last one before `until`
    ]


def test_one_off_and_the_next_occurrence() -> None:
    once = rule("2030-01-01T10:00:00+00:00", "2030-01-01T12:00:00+00:00", "none", "UTC")
    assert spans(occurrences(once, utc("2029-12-31T00:00"), utc("2030-01-02T00:00"))) == [
        ("01-01 10:00", "01-01 12:00")
    ]
    assert occurrences(once, utc("2030-01-01T12:00"), utc("2030-01-02T00:00")) == []
    upcoming = next_occurrence(once, utc("2026-12-04T00:00"))
    assert upcoming is not None
    assert upcoming.start == utc("2030-01-01T10:00")
    assert next_occurrence(once, utc("2030-01-01T12:00")) is None
    daily = rule("2026-01-01T22:00:00+00:00", "2026-01-02T02:00:00+00:00", "daily", "UTC")
    now = next_occurrence(daily, utc("2026-12-04T23:00"))
    assert now is not None
    assert (now.start, now.end - now.start) == (utc("2026-12-04T22:00"), timedelta(hours=4))
