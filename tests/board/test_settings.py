"""Settings refuse unsafe values at start-up."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from board.settings import Settings


@pytest.mark.parametrize("url", ["sqlite:///board.db", "mysql://x@y/z", "postgresql"])
def test_only_postgresql_urls(url: str) -> None:
    with pytest.raises(ValidationError, match="PostgreSQL only"):
        Settings(database_url=url)


@pytest.mark.parametrize("key", ["changeme", "short", "secret" * 1])
def test_weak_secret_keys_refused(key: str) -> None:
    with pytest.raises(ValidationError, match="32 random characters"):
        Settings(secret_key=key)


def test_env_prefix(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("GUA_BOARD_DATABASE_URL", "postgresql://u@h:5432/d")
    monkeypatch.setenv("GUA_BOARD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("GUA_BOARD_RAW_RETENTION_DAYS", "10")
    settings = Settings()
    assert settings.database_url == "postgresql://u@h:5432/d"
    assert settings.raw_retention_days == 10
    with pytest.raises(ValidationError):
        Settings(raw_retention_days=0)


def test_generated_secret_key_is_kept_private(tmp_path) -> None:
    settings = Settings(data_dir=tmp_path)
    key = settings.resolved_secret_key()
    assert len(key) >= 32
    assert Settings(data_dir=tmp_path).resolved_secret_key() == key
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0
