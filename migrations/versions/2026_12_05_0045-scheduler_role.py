"""the scheduler role: a membership that posts job records and reads the jobs list

A bridge on a scheduler's controller posts job records with a personal API token of a
`scheduler` member (board.jobs); memberships may now hold that role.

Revision ID: c41d2e3f5a61
Revises: b30c1d2e4f50
Create Date: 2026-12-05 00:45:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "c41d2e3f5a61"
down_revision: str | None = "b30c1d2e4f50"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_constraint(op.f("ck_memberships_role_known"), "memberships", type_="check")
    op.create_check_constraint(
        "role_known", "memberships", "role IN ('admin', 'member', 'finance', 'scheduler')"
    )


def downgrade() -> None:
    # The old check cannot hold a scheduler: those memberships (and their tokens) go.
    op.execute("DELETE FROM memberships WHERE role = 'scheduler'")
    op.drop_constraint(op.f("ck_memberships_role_known"), "memberships", type_="check")
    op.create_check_constraint(
        "role_known", "memberships", "role IN ('admin', 'member', 'finance')"
    )
