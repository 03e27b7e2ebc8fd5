"""Fixtures for the agent tests (no database, no GPU, no board)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.fakes import (
    DATA,
    FakeBoard,
    FakeProcRoot,
    ScriptedBoard,
    check_contract,
    logging_left_as_found,
)


@pytest.fixture(autouse=True)
def _logging_left_as_found() -> Iterator[None]:
    with logging_left_as_found():
        yield


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


@pytest.fixture
def fake_board() -> Iterator[Callable[[Callable[[socket.socket], None]], ScriptedBoard]]:
    boards: list[ScriptedBoard] = []

    def start(handler: Callable[[socket.socket], None]) -> ScriptedBoard:
        boards.append(ScriptedBoard(handler))
        return boards[-1]

    yield start
    for b in boards:
        b.close()


@pytest.fixture
def agent_logging() -> Iterator[None]:
    """The agent's CLI installs a root handler; it must not outlive the test."""
    with logging_left_as_found():
        yield
