"""The on-disk spool: atomic entries, caps by size and age, oldest first, survives restarts."""

from __future__ import annotations

import json
import os
import stat
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from agent.spool import Spool, entry_name

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


def body(at: datetime, pad: int = 0) -> bytes:
    return json.dumps({"observedAt": at.isoformat(), "pad": "x" * pad}).encode()


def spool(path: Path, **kw: object) -> Spool:
    return Spool(path, clock=lambda: NOW, **kw)  # type: ignore[arg-type]


def test_entries_sorted_oldest_first_regardless_of_write_order(tmp_path: Path) -> None:
    s = spool(tmp_path / "spool")
    times = [NOW - timedelta(seconds=n) for n in (5, 300, 1, 7200, 60)]
    for at in times:
        s.put(body(at))
    assert [e.observed_at for e in s.entries()] == sorted(times)


def test_names_sort_by_utc_time_even_from_other_offsets(tmp_path: Path) -> None:
    s = spool(tmp_path)
    seoul = timezone(timedelta(hours=9))
    later_in_seoul = (NOW - timedelta(minutes=1)).astimezone(seoul)
    s.put(json.dumps({"observedAt": later_in_seoul.isoformat()}).encode())
    s.put(body(NOW - timedelta(minutes=2)))
    assert [e.observed_at for e in s.entries()] == [
        NOW - timedelta(minutes=2),
        NOW - timedelta(minutes=1),
    ]
    assert entry_name(NOW) == "20261202T120000.000000Z.json"


def test_entry_is_exact_body_mode_0600(tmp_path: Path) -> None:
    s = spool(tmp_path / "spool")
    data = body(NOW)
    entry = s.put(data)
    assert entry is not None
    assert s.read(entry) == data
    assert stat.S_IMODE(entry.path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "spool").stat().st_mode) == 0o700


def test_survives_restart(tmp_path: Path) -> None:
    first = spool(tmp_path)
    first.put(body(NOW - timedelta(minutes=2)))
    first.put(body(NOW - timedelta(minutes=1)))
    del first
    second = spool(tmp_path)
    assert [json.loads(second.read(e) or b"")["observedAt"] for e in second.entries()] == [
        (NOW - timedelta(minutes=2)).isoformat(),
        (NOW - timedelta(minutes=1)).isoformat(),
    ]


def test_size_cap_drops_oldest_first(tmp_path: Path) -> None:
    one = len(body(NOW, pad=900))
    s = spool(tmp_path, max_bytes=one * 3)
    for n in range(5):
        s.put(body(NOW - timedelta(minutes=10 - n), pad=900))
    kept = [e.observed_at for e in s.entries()]
    assert kept == [NOW - timedelta(minutes=m) for m in (8, 7, 6)]
    assert s.total_bytes() <= one * 3


def test_age_cap_drops_expired(tmp_path: Path) -> None:
    clock = [NOW]
    s = Spool(tmp_path, max_age=timedelta(days=7), clock=lambda: clock[0])
    s.put(body(NOW - timedelta(days=6, hours=23)))
    s.put(body(NOW - timedelta(days=1)))
    assert len(s) == 2
    clock[0] = NOW + timedelta(hours=2)
    assert s.prune() == 1
    assert [e.observed_at for e in s.entries()] == [NOW - timedelta(days=1)]


def test_too_old_or_too_big_not_spooled(tmp_path: Path) -> None:
    s = spool(tmp_path, max_bytes=100, max_age=timedelta(hours=1))
    assert s.put(body(NOW - timedelta(hours=2))) is None
    assert s.put(body(NOW, pad=500)) is None
    assert s.put(b"not json") is None
    assert s.put(json.dumps({"observedAt": "2026-12-02T12:00:00"}).encode()) is None  # naive
    assert len(s) == 0


def test_same_observed_at_is_one_entry(tmp_path: Path) -> None:
    s = spool(tmp_path)
    s.put(body(NOW))
    s.put(body(NOW))
    assert len(s) == 1


def test_ignores_foreign_files_and_cleans_stale_temps(tmp_path: Path) -> None:
    s = spool(tmp_path)
    (tmp_path / "README").write_text("hi")
    stale = tmp_path / ".20261202T000000.000000Z.json.abc.tmp"
    stale.write_text("{")
    fresh = tmp_path / ".20261202T000001.000000Z.json.def.tmp"
    fresh.write_text("{")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    s.put(body(NOW))
    assert [e.name for e in s.entries()] == [entry_name(NOW)]
    assert not stale.exists()
    assert fresh.exists()  # may belong to a writer that is still running
    assert (tmp_path / "README").exists()


def test_remove_and_read_tolerate_a_concurrent_drainer(tmp_path: Path) -> None:
    a, b = spool(tmp_path), spool(tmp_path)
    entry = a.put(body(NOW))
    assert entry is not None
    b.remove(b.entries()[0])
    assert a.read(entry) is None
    a.remove(entry)
    assert len(a) == 0


def test_missing_directory_is_empty(tmp_path: Path) -> None:
    s = spool(tmp_path / "nope")
    assert s.entries() == []
    assert s.prune() == 0
