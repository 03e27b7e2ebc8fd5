"""account teams: which team a scheduler's account belongs to

An admin maps each Slurm account to a directory team, so the jobs report's rows per
account carry the team (docs/jobs.md).

Revision ID: e63f4a5b7c83
Revises: d52e3f4a6b72
Create Date: 2026-12-05 01:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e63f4a5b7c83"
down_revision: str | None = "d52e3f4a6b72"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "account_teams",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("account", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "length(account) BETWEEN 1 AND 64", name=op.f("ck_account_teams_account_length")
        ),
        sa.CheckConstraint(
            "length(team) BETWEEN 1 AND 100", name=op.f("ck_account_teams_team_length")
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_account_teams_workspace_id_workspaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workspace_id", "account", name=op.f("pk_account_teams")),
    )


def downgrade() -> None:
    op.drop_table("account_teams")
