"""Which names are time zones: IANA zones, not every file of the zone folder."""

from __future__ import annotations

import zoneinfo

# In the zone folder but no IANA zone: the leap-second copies (zoneinfo reads
# right/Europe/Berlin as +02:00 in December, while PostgreSQL cuts its days at
# 01:59:33: every local time an hour off), the POSIX copies, and the server's own
# setting (a link to /etc/localtime, whatever that is).
NOT_ZONE_PREFIXES = ("right/", "posix/")
NOT_ZONE_NAMES = frozenset({"localtime", "posixrules", "right", "posix"})


def iana_zone(name: str) -> zoneinfo.ZoneInfo:
    """The zone of an IANA name; ValueError for anything else."""
    if name.startswith(NOT_ZONE_PREFIXES) or name in NOT_ZONE_NAMES:
        raise ValueError(f"{name[:64]!r} is not an IANA time zone")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        # OSError: a folder of the zone database ("America") or a name too long for a
        # file name is no zone either.
        raise ValueError(f"{name[:64]!r} is not an IANA time zone") from None
