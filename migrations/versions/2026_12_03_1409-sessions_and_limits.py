"""sessions and limits

Web sessions move to the server (`web_sessions`): signing out, a password change or an
admin's "sign out everywhere" deletes the row, and every process sees it at once.
Failed sign-ins are counted in `signin_failures`, so the limit holds across processes
and replicas. `workspaces.max_gpus_per_host` caps the GPU identities one host may create.

Revision ID: 87f01dfd327a
Revises: 7c1f0b9d2a63
Create Date: 2026-12-03 14:09:28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "87f01dfd327a"
down_revision: str | None = "7c1f0b9d2a63"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "signin_failures",
        sa.Column("key_hash", sa.LargeBinary(), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key_hash", name=op.f("pk_signin_failures")),
    )
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("token_hash", sa.LargeBinary(), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_web_sessions_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_web_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_web_sessions_token_hash")),
    )
    op.create_index(op.f("ix_web_sessions_user_id"), "web_sessions", ["user_id"], unique=False)
    op.add_column(
        "workspaces",
        sa.Column("max_gpus_per_host", sa.Integer(), server_default="64", nullable=False),
    )
    op.create_check_constraint(
        "max_gpus_per_host_range", "workspaces", "max_gpus_per_host BETWEEN 1 AND 4096"
    )


def downgrade() -> None:
    op.drop_constraint("max_gpus_per_host_range", "workspaces", type_="check")
    op.drop_column("workspaces", "max_gpus_per_host")
    op.drop_index(op.f("ix_web_sessions_user_id"), table_name="web_sessions")
    op.drop_table("web_sessions")
    op.drop_table("signin_failures")
