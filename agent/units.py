"""Parsing of the CLI's durations (`30s`, `200ms`, `7d`) and sizes (`64MiB`)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
# Beyond these a duration overflowed timedelta (a traceback, exit 1, restarted by systemd
# forever) and a size int(); no setting of the agent needs more.
MAX_DURATION_SECONDS = 3650 * 86400.0
MAX_SIZE_BYTES = 1024**5


def parse_duration(text: str) -> float:
    """Seconds in `text`: a number with an optional unit ms, s, m, h or d (default s)."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 200ms, 5m, 7d)")
    unit = (match.group(2) or "s").lower()
    seconds = float(match.group(1)) * _DURATION_UNITS[unit]
    if not seconds <= MAX_DURATION_SECONDS:  # also inf (400 nines) and nan
        raise ValueError(f"duration too long: {text.strip()[:40]!r} (at most 3650d)")
    return seconds


def parse_size(text: str) -> int:
    """Bytes in `text`: a number with an optional binary unit K, M, G or T (`64M` = `64MiB`)."""
    match = _SIZE.match(text)
    if not match or (match.group(3) and match.group(3).lower() == "i"):
        raise ValueError(f"not a size: {text!r} (use e.g. 64MiB, 512K, 1G)")
    size = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if not size <= MAX_SIZE_BYTES:
        raise ValueError(f"size too large: {text.strip()[:40]!r} (at most 1024T)")
    return int(size)


def format_duration(seconds: float) -> str:
    """`30.0` → `30s`, `0.2` → `200ms`."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"
