"""gpu state since

Placeholder for issue 14 (fleet at scale): how long each GPU has been in its state.

Revision ID: a14b3f8d6e03
Revises: a18e7d2c9f02
Create Date: 2026-12-03 17:00:00
"""

from collections.abc import Sequence

revision: str = "a14b3f8d6e03"
down_revision: str | None = "a18e7d2c9f02"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
