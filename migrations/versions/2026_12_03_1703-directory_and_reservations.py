"""directory and reservations

Placeholder for issue 15: the directory of Linux users and reservations.

Revision ID: a15c9e1a7d04
Revises: a14b3f8d6e03
Create Date: 2026-12-03 17:00:00
"""

from collections.abc import Sequence

revision: str = "a15c9e1a7d04"
down_revision: str | None = "a14b3f8d6e03"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
