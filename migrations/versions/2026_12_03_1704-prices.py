"""prices

Placeholder for issue 17 (money): prices per GPU model, valid from a date.

Revision ID: a17e2b5c8f05
Revises: a15c9e1a7d04
Create Date: 2026-12-03 17:04:00
"""

from collections.abc import Sequence

revision: str = "a17e2b5c8f05"
down_revision: str | None = "a15c9e1a7d04"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
