"""What the board takes for an email address: a login name, and somewhere mail can go."""

from __future__ import annotations

import re
from email.utils import getaddresses

# One @, no space or control character (NUL included: PostgreSQL text holds none).
_EMAIL = re.compile(r"[^@\s\x00-\x1f\x7f]+@[^@\s\x00-\x1f\x7f]+")
MAX_EMAIL_CHARS = 320


def plausible_email(email: str) -> bool:
    """Could be an address (whole string: a trailing newline is not one)."""
    return len(email) <= MAX_EMAIL_CHARS and _EMAIL.fullmatch(email) is not None


def mailable(address: str) -> bool:
    """The address reads back as itself from a To header and an SMTP envelope: "a)b@x",
    "a,b@x" or "a<b>@x" read as "a" or "b" (mail went elsewhere), and "(a@x" or a quoted
    domain made the mail library raise for every address of the mail."""
    try:
        read = getaddresses([address])
    except (ValueError, IndexError):
        return False
    return len(read) == 1 and read[0] == ("", address)
