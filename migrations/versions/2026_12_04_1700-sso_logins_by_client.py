"""sign-ins started and not finished, counted per client

Each anonymous start of a single sign-on kept a pending row 10 minutes with no bound: one
client could fill the table. The row now names (by digest) the client that started it,
so the starts of one client can be counted and bounded.

Revision ID: a28b4c6d8e10
Revises: a27e1f4a6072
Create Date: 2026-12-04 17:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a28b4c6d8e10"
down_revision: str | None = "a27e1f4a6072"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Pending sign-ins live 10 minutes and none knows its client: a sign-in in flight
    # during the upgrade starts again.
    op.execute("DELETE FROM sso_logins")
    op.add_column("sso_logins", sa.Column("client_hash", sa.LargeBinary(), nullable=False))
    op.create_index(op.f("ix_sso_logins_client_hash"), "sso_logins", ["client_hash"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_sso_logins_client_hash"), table_name="sso_logins")
    op.drop_column("sso_logins", "client_hash")
