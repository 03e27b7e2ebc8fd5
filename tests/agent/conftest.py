"""Fixtures for the agent tests (no database, no GPU, no board)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.fakes import DATA, FakeBoard, FakeProcRoot, check_contract


@pytest.fixture(autouse=True)
def _logging_left_as_found() -> Iterator[None]:
    """The agent's CLI sets up logging for its process (a root handler on the stderr of
    the moment, httpx quieted); run in-process here, that must not outlive the test, or
    later tests in the same worker log to a closed stream and see no httpx lines."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quieted = {name: logging.getLogger(name).level for name in ("httpx", "httpcore")}
    yield
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    for name, was in quieted.items():
        logging.getLogger(name).setLevel(was)


@pytest.fixture
def proc_root(tmp_path: Path) -> FakeProcRoot:
    root = tmp_path / "proc"
    root.mkdir()
    return FakeProcRoot(root)


@pytest.fixture
def board() -> Iterator[FakeBoard]:
    server = FakeBoard()
    server.thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.server.shutdown()
        server.server.server_close()


@pytest.fixture
def contract() -> Callable[[dict[str, Any]], None]:
    return check_contract


@pytest.fixture
def example() -> Callable[[str], Any]:
    def load(name: str) -> Any:
        return json.loads((DATA / name).read_text())

    return load
