"""Fixtures of the notices tests: a board app with mail and insecure (local) webhooks
allowed, the receivers, and a workspace with one host whose GPU-0 we drive."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from board.app import create_app
from board.settings import Settings
from tests.notices.receivers import HttpReceiver, SmtpReceiver

SECRET_KEY = "k" * 20 + "notices-test-secret-key"


@pytest.fixture
def smtp() -> Iterator[SmtpReceiver]:
    receiver = SmtpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture
def hook() -> Iterator[HttpReceiver]:
    receiver = HttpReceiver().start()
    yield receiver
    receiver.stop()


def notice_settings(database_url: str, data_dir: Path, smtp_url: str | None, **kw: Any) -> Settings:
    chosen: dict[str, Any] = {
        "database_url": database_url,
        "data_dir": data_dir,
        "secret_key": SECRET_KEY,
        "public_url": "http://board.test",
        "smtp_url": smtp_url,
        "mail_from": "board@lab.example",
        "allow_insecure_webhooks": True,
        "notices_retry_base_seconds": 0.2,
        "notices_timeout_seconds": 3.0,
        "notices_lease_seconds": 12.0,
    }
    return Settings(**(chosen | kw))


@pytest.fixture
def settings(database_url: str, tmp_path: Path, smtp: SmtpReceiver) -> Settings:
    return notice_settings(database_url, tmp_path / "data", smtp.url)


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[Any]:
    application = create_app(settings, run_maintenance=False)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as c:
        yield c
