"""workspace zones are IANA zones

The settings accepted zone-folder copies before they were refused: `right/Europe/Berlin`
(read by Python as +02:00 in December, an hour off, and by PostgreSQL with leap seconds),
`posix/Europe/Berlin`, and `localtime` / `posixrules` (whatever the server's files say).
Stored ones now fail every check that reads the setting (prices, statements). A copy
becomes the zone it copies; the server's own setting, which names no zone, becomes UTC.

Revision ID: a26d9e3f5061
Revises: a25c8d2e4f50
Create Date: 2026-12-04 05:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "a26d9e3f5061"
down_revision: str | None = "a25c8d2e4f50"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        r"""
        UPDATE workspaces
           SET timezone = CASE
                 WHEN timezone ~ '^(right|posix)/.+' THEN regexp_replace(timezone, '^(right|posix)/', '')
                 ELSE 'UTC'
               END
         WHERE timezone ~ '^(right|posix)/' OR timezone IN ('localtime', 'posixrules', 'right', 'posix')
        """
    )


def downgrade() -> None:
    pass  # the old names were never what anyone meant
