"""The embedded PostgreSQL a new user gets when no database URL is configured."""

from __future__ import annotations

import logging
import os
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


def stop_embedded(data_dir: Path) -> bool:
    """Stop the embedded PostgreSQL under data_dir, whoever started it; True when it ran.

    A command that started it (the demo) stops it on its way out: left running, its six
    processes outlived the command. pgserver's own handle count cannot decide that here:
    every `gua-board` command registers with it and one killed abruptly never leaves.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver._commands import pg_ctl  # type: ignore[attr-defined]
        from pgserver.postgres_server import PostgresServer

    pgdata = (data_dir / "pgdata").expanduser().resolve()
    if not (pgdata / "postmaster.pid").exists():
        return False
    server = PostgresServer._instances.get(pgdata)
    user = server.system_user if server is not None else _system_user()
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    except Exception:  # already stopped, or not ours to stop: nothing to clean up
        log.warning("could not stop the embedded PostgreSQL under %s", pgdata)
        return False
    return True


def _system_user() -> str | None:
    # pgserver runs PostgreSQL as its own user when started by root (initdb refuses root).
    return "pgserver" if os.name == "posix" and os.geteuid() == 0 else None
