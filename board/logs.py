"""No secret in a log line: a filter on every handler that masks tokens and cookies.

The board never logs a secret itself, but libraries do at debug level: the WebSocket
layer logs every request header, `Authorization: Bearer gua_agent_…` and the session
cookie included. Masking at the handler catches whatever any logger sends.
"""

from __future__ import annotations

import logging
import re

# A token keeps its non-secret prefix (kind and public id), so a line still says whose.
_TOKEN = re.compile(r"(gua_(?:agent|pat|enroll)_[0-9a-f]{8})_[A-Za-z0-9_\-]+")
_BEARER = re.compile(r"(?i)(bearer\s+)(?!gua_)[^\s'\",]+")
_COOKIE = re.compile(r"(gua_session=)[^;\s'\"]+")


def redact(text: str) -> str:
    text = _TOKEN.sub(r"\1_…", text)
    text = _BEARER.sub(r"\1…", text)
    return _COOKIE.sub(r"\1…", text)


class RedactSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def install_redaction() -> None:
    """Add the filter to every handler configured so far (root and named loggers)."""
    loggers: list[logging.Logger | logging.PlaceHolder] = [logging.getLogger()]
    loggers += list(logging.Logger.manager.loggerDict.values())
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if not any(isinstance(f, RedactSecrets) for f in handler.filters):
                handler.addFilter(RedactSecrets())
