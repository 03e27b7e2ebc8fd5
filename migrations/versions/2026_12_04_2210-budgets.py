"""budgets: each team's dated budget per month or quarter, a contact per team

`directory_teams` gives a team (a label on directory entries) a contact email, which
budget notices go to. `budgets` holds each team's dated budgets, `budget_notices` the
warnings and overruns told (once per team, period and kind: the key), `budget_checks`
when a workspace's budgets were last compared with its usage.

Revision ID: e81ab5cf36f9
Revises: 5f0557e61b7b
Create Date: 2026-12-04 22:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e81ab5cf36f9"
down_revision: str | None = "5f0557e61b7b"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "directory_teams",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("contact_email", sa.Text(), nullable=True),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint("length(team) BETWEEN 1 AND 100", name="team_length"),
        sa.CheckConstraint(
            "contact_email IS NULL OR length(contact_email) BETWEEN 3 AND 320",
            name="contact_email_length",
        ),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id", "team"),
    )
    op.create_table(
        "budgets",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("period_kind", sa.Text(), nullable=False),
        sa.Column("valid_from", sa.Date(), nullable=False),
        sa.Column("gpu_hours", sa.Numeric(15, 6), nullable=True),
        sa.Column("amount", sa.Numeric(17, 4), nullable=True),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint("length(team) BETWEEN 1 AND 100", name="team_length"),
        sa.CheckConstraint("period_kind IN ('month', 'quarter')", name="period_kind_known"),
        sa.CheckConstraint("gpu_hours IS NULL OR gpu_hours >= 0", name="gpu_hours_not_negative"),
        sa.CheckConstraint("amount IS NULL OR amount >= 0", name="amount_not_negative"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id", "team", "period_kind", "valid_from"),
    )
    op.create_table(
        "budget_notices",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("period", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("told_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('warning', 'exceeded')", name="kind_known"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id", "team", "period", "kind"),
    )
    op.create_table(
        "budget_checks",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id"),
    )


def downgrade() -> None:
    op.drop_table("budget_checks")
    op.drop_table("budget_notices")
    op.drop_table("budgets")
    op.drop_table("directory_teams")
