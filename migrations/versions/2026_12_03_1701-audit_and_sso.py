"""audit and sso

The audit log (`audit_events`: one row per admin action or sign-in, per workspace, kept
for the workspace's retention_days), sign-ins in flight with an OpenID provider
(`sso_logins`: single-use state, nonce and PKCE verifier, bound to a browser), and an
optional name and expiry for personal API tokens.

Revision ID: a18e7d2c9f02
Revises: a20f0c4e1b01
Create Date: 2026-12-03 17:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "a18e7d2c9f02"
down_revision: str | None = "a20f0c4e1b01"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column(
            "at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("actor_user_id", sa.BigInteger(), nullable=True),
        sa.Column("actor_email", sa.Text(), nullable=True),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=True),
        sa.Column(
            "detail",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("client_address", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_audit_events_workspace_id_workspaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workspace_id", "id", name=op.f("pk_audit_events")),
    )
    op.create_index(
        "ix_audit_events_workspace_id_id",
        "audit_events",
        ["workspace_id", sa.text("id DESC")],
        unique=False,
    )
    op.create_index(
        "ix_audit_events_workspace_id_at", "audit_events", ["workspace_id", "at"], unique=False
    )
    op.create_table(
        "sso_logins",
        sa.Column("state_hash", sa.LargeBinary(), nullable=False),
        sa.Column("browser_hash", sa.LargeBinary(), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("nonce", sa.Text(), nullable=False),
        sa.Column("code_verifier", sa.Text(), nullable=False),
        sa.Column("next_path", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("state_hash", name=op.f("pk_sso_logins")),
    )
    op.create_index(op.f("ix_sso_logins_expires_at"), "sso_logins", ["expires_at"], unique=False)
    op.add_column("api_tokens", sa.Column("name", sa.Text(), nullable=True))
    op.add_column("api_tokens", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("api_tokens", "expires_at")
    op.drop_column("api_tokens", "name")
    op.drop_index(op.f("ix_sso_logins_expires_at"), table_name="sso_logins")
    op.drop_table("sso_logins")
    op.drop_index("ix_audit_events_workspace_id_at", table_name="audit_events")
    op.drop_index("ix_audit_events_workspace_id_id", table_name="audit_events")
    op.drop_table("audit_events")
