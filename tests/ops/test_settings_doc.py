"""The operator's manual lists every setting (docs/operations.md, settings reference)."""

from __future__ import annotations

from pathlib import Path

from board.settings import Settings

MANUAL = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_every_setting_is_in_the_manual() -> None:
    text = MANUAL.read_text()
    missing = [
        f"GUA_BOARD_{name.upper()}"
        for name in Settings.model_fields
        if f"`GUA_BOARD_{name.upper()}`" not in text
    ]
    assert not missing, f"docs/operations.md lacks {missing}"
