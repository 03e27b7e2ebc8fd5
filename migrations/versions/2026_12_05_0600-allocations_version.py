"""allocations version: a host's counter of changes to what its job GPUs read

`hosts.allocations_version` goes up whenever anything the ingest path reads of a host's
scheduler jobs changes: its `job_gpus` rows (a record recorded, ended, re-pointed or
deleted), its `cluster_hosts` row, or its GPUs' numbers that a job's device is matched by
(`gpus.gpu_index`, `gpus.minor_number`, a GPU added or removed). Triggers keep it, so no
writer can forget it. The ingest writer keeps each host's job GPUs between batches and
reads them again only when the counter moved (board.jobs.cache).

Revision ID: 1cf2e86765cf
Revises: b96c7d8e0f16
Create Date: 2026-12-05 06:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "1cf2e86765cf"
down_revision: str | None = "b96c7d8e0f16"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# One statement-level function per transition table's name: the hosts named by the rows
# a statement changed move their counter once, whatever the number of rows.
_BUMP = """
CREATE FUNCTION bump_allocations_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE hosts h SET allocations_version = h.allocations_version + 1
    FROM (SELECT DISTINCT workspace_id, host_id FROM changed_rows) c
    WHERE h.workspace_id = c.workspace_id AND h.id = c.host_id;
    RETURN NULL;
END
$$
"""
# An update of a GPU counts only when a number a device is matched by changed (ingest
# upserts a GPU whose name or memory changed, too).
_BUMP_GPU_NUMBERS = """
CREATE FUNCTION bump_allocations_version_of_gpus() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE hosts h SET allocations_version = h.allocations_version + 1
    FROM (SELECT DISTINCT n.workspace_id, n.host_id
          FROM new_rows n JOIN old_rows o ON o.workspace_id = n.workspace_id AND o.id = n.id
          WHERE o.gpu_index IS DISTINCT FROM n.gpu_index
             OR o.minor_number IS DISTINCT FROM n.minor_number
             OR o.host_id IS DISTINCT FROM n.host_id) c
    WHERE h.workspace_id = c.workspace_id AND h.id = c.host_id;
    RETURN NULL;
END
$$
"""
_TABLES = ("job_gpus", "cluster_hosts", "gpus")


def upgrade() -> None:
    op.add_column(
        "hosts",
        sa.Column("allocations_version", sa.BigInteger(), server_default="0", nullable=False),
    )
    op.execute(_BUMP)
    op.execute(_BUMP_GPU_NUMBERS)
    for table in _TABLES:
        op.execute(
            f"CREATE TRIGGER {table}_added_bump_allocations AFTER INSERT ON {table} "
            "REFERENCING NEW TABLE AS changed_rows "
            "FOR EACH STATEMENT EXECUTE FUNCTION bump_allocations_version()"
        )
        op.execute(
            f"CREATE TRIGGER {table}_removed_bump_allocations AFTER DELETE ON {table} "
            "REFERENCING OLD TABLE AS changed_rows "
            "FOR EACH STATEMENT EXECUTE FUNCTION bump_allocations_version()"
        )
    for table in ("job_gpus", "cluster_hosts"):
        op.execute(
            f"CREATE TRIGGER {table}_changed_bump_allocations AFTER UPDATE ON {table} "
            "REFERENCING NEW TABLE AS changed_rows "
            "FOR EACH STATEMENT EXECUTE FUNCTION bump_allocations_version()"
        )
    op.execute(
        "CREATE TRIGGER gpus_changed_bump_allocations AFTER UPDATE ON gpus "
        "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
        "FOR EACH STATEMENT EXECUTE FUNCTION bump_allocations_version_of_gpus()"
    )


def downgrade() -> None:
    for table in _TABLES:
        for event in ("added", "removed", "changed"):
            op.execute(f"DROP TRIGGER IF EXISTS {table}_{event}_bump_allocations ON {table}")
    op.execute("DROP FUNCTION bump_allocations_version_of_gpus()")
    op.execute("DROP FUNCTION bump_allocations_version()")
    op.drop_column("hosts", "allocations_version")
