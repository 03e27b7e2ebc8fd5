"""The board's logs: one JSON object a line, each with its request's id; no secret ever.

- **Redaction.** The board never logs a secret itself, but libraries do at debug level:
  the WebSocket layer logs every request header, `Authorization: Bearer gua_agent_…` and
  the session cookie included. A filter on every handler masks tokens and cookies, and
  the JSON formatter masks the message and any traceback again, so whatever any logger
  sends is caught.
- **Request ids.** `RequestContextMiddleware` takes the caller's `X-Request-ID` when it is
  sane (at most 64 of `A-Z a-z 0-9 . _ : -`), else makes one, returns it in the
  response's `X-Request-ID`, and every line logged while the request runs carries it.
- **Access log** (`GUA_BOARD_ACCESS_LOG=true`): one line per request when its response
  ends (method, path without the query, status, milliseconds, client address).
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# A token keeps its non-secret prefix (kind and public id), so a line still says whose.
# Any kind (agent, pat, enroll, cal: a calendar feed's token travels in its URL's query).
_TOKEN = re.compile(r"(gua_[a-z]+_[0-9a-f]{8})_[A-Za-z0-9_\-]+")
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


# -- request ids ----------------------------------------------------------------------
request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,64}")
REQUEST_ID_HEADER = b"x-request-id"


def choose_request_id(given: bytes | None) -> str:
    """The caller's id when it is sane, else a new random one."""
    if given is not None:
        text = given.decode("latin-1")
        if _SANE_REQUEST_ID.fullmatch(text):
            return text
    return secrets.token_hex(16)


class RequestIdFilter(logging.Filter):
    """Puts the running request's id on each record (`%(request_id)s` in text logs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id.get()
        return True


# Attributes every LogRecord has; anything else was passed with `extra=` and is kept.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "request_id",
    "color_message",  # uvicorn's coloured copy of the message
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, request_id, extras, exc."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Python's warnings are written to stderr past logging, as plain text; built in
        # every process that applies the config (uvicorn's workers do), this routes them
        # through logging (logger py.warnings) so that every line stays JSON.
        logging.captureWarnings(True)

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        rid = getattr(record, "request_id", None) or request_id.get()
        if rid:
            line["request_id"] = rid
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line:
                plain = value is None or isinstance(value, int | float | bool)
                line[key] = value if plain else redact(str(value))
        if record.exc_info:
            line["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False)


def logging_config(level: str, fmt: str) -> dict[str, Any]:
    """The dictConfig `gua-board serve` gives uvicorn (and so every worker process)."""
    formatter: dict[str, Any] = (
        {"()": "board.logs.JsonFormatter"}
        if fmt == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "redact": {"()": "board.logs.RedactSecrets"},
            "request_id": {"()": "board.logs.RequestIdFilter"},
        },
        "formatters": {"board": formatter},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "board",
                "filters": ["request_id", "redact"],
            }
        },
        "root": {"level": level.upper(), "handlers": ["stderr"]},
        "loggers": {
            # uvicorn's own loggers go through the root handler, in the same format.
            "uvicorn": {"level": level.upper(), "handlers": [], "propagate": True},
            "uvicorn.error": {"level": level.upper(), "handlers": [], "propagate": True},
            # The board writes its own access log (board.access), when asked to.
            "uvicorn.access": {"level": "WARNING", "handlers": [], "propagate": False},
        },
    }


access_log = logging.getLogger("board.access")


class RequestContextMiddleware:
    """Pure ASGI, outermost: the request id (in, out, on every line) and the access log."""

    def __init__(self, app: ASGIApp, log_access: bool = False) -> None:
        self.app = app
        self.log_access = log_access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope.get("headers", ()) if k == REQUEST_ID_HEADER), None)
        rid = choose_request_id(given)
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", ()) if k != REQUEST_ID_HEADER]
                message = {**message, "headers": [*headers, (REQUEST_ID_HEADER, rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except BaseException:
            status = status or 500
            raise
        finally:
            if self.log_access:
                self._log(scope, status, time.perf_counter() - started)
            request_id.reset(token)

    @staticmethod
    def _log(scope: Scope, status: int, seconds: float) -> None:
        client = scope.get("client")
        access_log.info(
            "%s %s %s",
            scope.get("method", "WS"),
            scope.get("path", ""),
            status,
            extra={
                "method": scope.get("method", "WEBSOCKET"),
                "path": scope.get("path", ""),
                "status": status,
                "duration_ms": round(seconds * 1000, 2),
                "client": client[0] if client else None,
            },
        )
