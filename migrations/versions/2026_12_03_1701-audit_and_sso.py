"""audit and sso

Placeholder for issue 18 (operations): the audit log and OpenID Connect identities.

Revision ID: a18e7d2c9f02
Revises: a20f0c4e1b01
Create Date: 2026-12-03 17:00:00
"""

from collections.abc import Sequence

revision: str = "a18e7d2c9f02"
down_revision: str | None = "a20f0c4e1b01"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
