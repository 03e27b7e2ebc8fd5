"""Logging to stderr with every known secret redacted, whatever code path logs it."""

from __future__ import annotations

import logging
import sys

REDACTED = "[redacted]"


class RedactingFilter(logging.Filter):
    """Replaces registered secrets (tokens) in every record before it is written."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        for secret in self.secrets:
            message = message.replace(secret, REDACTED)
            if record.exc_text:
                record.exc_text = record.exc_text.replace(secret, REDACTED)
        record.msg, record.args = message, None
        return True


_filter = RedactingFilter()
_handler: logging.Handler | None = None


def setup_logging(level: str = "INFO") -> None:
    """Log lines to stderr (journald adds its own timestamps under systemd)."""
    global _handler
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    _handler.addFilter(_filter)
    root.addHandler(_handler)
    root.setLevel(level.upper())
    # httpx logs every request URL at INFO; keep that out of the agent's own log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)


def redact(*secrets: str) -> None:
    """Never let these strings reach the log."""
    _filter.secrets.update(s for s in secrets if s)


def scrub(text: str) -> str:
    """`text` with registered secrets redacted, for messages printed outside logging."""
    for secret in _filter.secrets:
        text = text.replace(secret, REDACTED)
    return text
