"""host hour rollups

Placeholder for issue 20 (reports): rollups per host and hour.

Revision ID: a20f0c4e1b01
Revises: 87f01dfd327a
Create Date: 2026-12-03 17:00:00
"""

from collections.abc import Sequence

revision: str = "a20f0c4e1b01"
down_revision: str | None = "87f01dfd327a"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
