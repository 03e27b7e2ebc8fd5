"""notices

Placeholder for issue 16 (notices): episodes, channels, the delivery outbox, snoozes.

Revision ID: a16f3c6d9e06
Revises: a17e2b5c8f05
Create Date: 2026-12-03 17:05:00
"""

from collections.abc import Sequence

revision: str = "a16f3c6d9e06"
down_revision: str | None = "a17e2b5c8f05"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
