"""citus-ready keys: every tenant key leads with workspace_id; global keys get routes

A cluster distributed by `workspace_id` (docs/operations.md, "Past one database: Citus";
ADR 0014) accepts a primary key, unique constraint or foreign key of a tenant table only
if it includes `workspace_id`. The global unique indexes on secrets and public ids become
unique per workspace; what must stay unique across workspaces (agent, API, enrollment and
calendar feed tokens, workspace slugs) is kept so by one small reference table,
`routing_keys` (kind, key) → workspace_id, filled here from the live rows. The notices'
outbox events get `workspace_id` in their primary key, and their deliveries in their
unique key and foreign key.

Revision ID: 0188b06eecde
Revises: e4f85916fc02
Create Date: 2026-12-05 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0188b06eecde"
down_revision: str | None = "e4f85916fc02"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, column): unique alone before, unique within the workspace after.
PER_WORKSPACE = (
    ("api_tokens", "token_hash"),
    ("enrollment_tokens", "token_hash"),
    ("calendar_feed_tokens", "token_hash"),
    ("hosts", "agent_token_hash"),
    ("hosts", "public_id"),
    ("reservations", "public_id"),
    ("scheduler_jobs", "public_id"),
    ("notice_channels", "public_id"),
    ("host_maintenance_windows", "public_id"),
)

# The routes of the keys that may be used now (revoked, claimed ones route nowhere).
ROUTES = (
    "SELECT 'agent_token', agent_token_hash, workspace_id FROM hosts WHERE revoked_at IS NULL",
    "SELECT 'api_token', token_hash, workspace_id FROM api_tokens WHERE revoked_at IS NULL",
    "SELECT 'enrollment_token', token_hash, workspace_id FROM enrollment_tokens "
    "WHERE revoked_at IS NULL AND claimed_at IS NULL",
    "SELECT 'calendar_feed_token', token_hash, workspace_id FROM calendar_feed_tokens",
    "SELECT 'workspace_slug', convert_to(slug, 'UTF8'), id FROM workspaces",
)


def upgrade() -> None:
    op.create_table(
        "routing_keys",
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("key", sa.LargeBinary(), nullable=False),
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "kind IN ('agent_token', 'api_token', 'enrollment_token', 'calendar_feed_token', "
            "'workspace_slug')",
            name=op.f("ck_routing_keys_kind_known"),
        ),
        sa.CheckConstraint(
            "octet_length(key) BETWEEN 1 AND 64", name=op.f("ck_routing_keys_key_bounded")
        ),
        sa.PrimaryKeyConstraint("kind", "key", name=op.f("pk_routing_keys")),
    )
    for select in ROUTES:
        op.execute(f"INSERT INTO routing_keys (kind, key, workspace_id) {select}")

    for table, column in PER_WORKSPACE:
        op.create_unique_constraint(
            op.f(f"uq_{table}_workspace_id_{column}"), table, ["workspace_id", column]
        )
        op.drop_constraint(op.f(f"uq_{table}_{column}"), table, type_="unique")
    op.drop_constraint(op.f("uq_workspaces_slug"), "workspaces", type_="unique")

    # The outbox: events keyed within their workspace, deliveries pointing at them so.
    op.drop_constraint(
        op.f("fk_notice_deliveries_event_id_notice_events"), "notice_deliveries", type_="foreignkey"
    )
    op.drop_constraint(
        op.f("uq_notice_deliveries_event_id_kind_recipient"), "notice_deliveries", type_="unique"
    )
    op.drop_constraint(op.f("pk_notice_events"), "notice_events", type_="primary")
    op.create_primary_key(op.f("pk_notice_events"), "notice_events", ["workspace_id", "id"])
    op.drop_index(op.f("ix_notice_events_workspace_id"), table_name="notice_events")
    op.create_unique_constraint(
        op.f("uq_notice_deliveries_workspace_id_event_id_kind_recipient"),
        "notice_deliveries",
        ["workspace_id", "event_id", "kind", "recipient"],
    )
    op.create_foreign_key(
        op.f("fk_notice_deliveries_workspace_id_event_id_notice_events"),
        "notice_deliveries",
        "notice_events",
        ["workspace_id", "event_id"],
        ["workspace_id", "id"],
        ondelete="CASCADE",
    )


def downgrade() -> None:
    op.drop_constraint(
        op.f("fk_notice_deliveries_workspace_id_event_id_notice_events"),
        "notice_deliveries",
        type_="foreignkey",
    )
    op.drop_constraint(
        op.f("uq_notice_deliveries_workspace_id_event_id_kind_recipient"),
        "notice_deliveries",
        type_="unique",
    )
    op.create_index(
        op.f("ix_notice_events_workspace_id"), "notice_events", ["workspace_id"], unique=False
    )
    op.drop_constraint(op.f("pk_notice_events"), "notice_events", type_="primary")
    op.create_primary_key(op.f("pk_notice_events"), "notice_events", ["id"])
    op.create_unique_constraint(
        op.f("uq_notice_deliveries_event_id_kind_recipient"),
        "notice_deliveries",
        ["event_id", "kind", "recipient"],
    )
    op.create_foreign_key(
        op.f("fk_notice_deliveries_event_id_notice_events"),
        "notice_deliveries",
        "notice_events",
        ["event_id"],
        ["id"],
        ondelete="CASCADE",
    )

    op.create_unique_constraint(op.f("uq_workspaces_slug"), "workspaces", ["slug"])
    for table, column in PER_WORKSPACE:
        op.create_unique_constraint(op.f(f"uq_{table}_{column}"), table, [column])
        op.drop_constraint(op.f(f"uq_{table}_workspace_id_{column}"), table, type_="unique")
    op.drop_table("routing_keys")
