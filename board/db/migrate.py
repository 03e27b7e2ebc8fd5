"""Apply the alembic migrations programmatically (serve and `gua-board migrate`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from board.db.urls import sqlalchemy_url

REPO_ROOT = Path(__file__).resolve().parents[2]


def alembic_config(database_url: str) -> Config:
    config = Config(str(REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    config.attributes["database_url"] = sqlalchemy_url(database_url)
    config.attributes["configure_logger"] = False
    return config


def upgrade(database_url: str) -> None:
    command.upgrade(alembic_config(database_url), "head")
