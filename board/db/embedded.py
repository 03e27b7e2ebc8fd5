"""The embedded PostgreSQL a new user gets when no database URL is configured."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

log = logging.getLogger(__name__)


def embedded_database_url(data_dir: Path) -> str:
    """Start (or reuse) the pgserver instance under data_dir and return its URL.

    cleanup_mode=None keeps the server running after this process exits, so every
    `gua-board` command reuses the same instance instead of starting its own.
    """
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (servers, containers); harmless here.
        warnings.simplefilter("ignore")
        from pgserver import postgres_server

    pgdata = data_dir / "pgdata"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = postgres_server.get_server(pgdata, cleanup_mode=None)
    uri: str = server.get_uri()
    log.info("using embedded PostgreSQL under %s", pgdata)
    return uri
