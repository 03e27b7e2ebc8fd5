"""allocations version: a host's counter of changes to what its job GPUs read

`host_allocation_versions.version` goes up whenever anything the ingest path reads of a
host's scheduler jobs changes: its `job_gpus` rows (a record recorded, ended, re-pointed or
deleted), its `cluster_hosts` row, or its GPUs' numbers that a job's device is matched by
(`gpus.gpu_index`, `gpus.minor_number`, a GPU added or removed). Triggers keep it, so no
writer can forget it. The ingest writer keeps each host's job GPUs between batches and
reads them again only when the counter moved (board.jobs.batch).

A table of its own, not a column of `hosts`, and without foreign keys: a GPU added by an
ingest batch moves the counter, and a second update of the host row in that transaction
would make PostgreSQL check the row's workspace key again (a KEY SHARE lock on the
workspace), so a push would wait for a settings change holding the workspace row.

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
    INSERT INTO host_allocation_versions AS v (workspace_id, host_id, version)
    SELECT DISTINCT workspace_id, host_id, 1 FROM changed_rows ORDER BY 1, 2
    ON CONFLICT (workspace_id, host_id) DO UPDATE SET version = v.version + 1;
    RETURN NULL;
END
$$
"""
# An update of a GPU counts only when a number a device is matched by changed (ingest
# upserts a GPU whose name or memory changed, too).
_BUMP_GPU_NUMBERS = """
CREATE FUNCTION bump_allocations_version_of_gpus() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO host_allocation_versions AS v (workspace_id, host_id, version)
    SELECT DISTINCT n.workspace_id, n.host_id, 1
    FROM new_rows n JOIN old_rows o ON o.workspace_id = n.workspace_id AND o.id = n.id
    WHERE o.gpu_index IS DISTINCT FROM n.gpu_index
       OR o.minor_number IS DISTINCT FROM n.minor_number
       OR o.host_id IS DISTINCT FROM n.host_id
    ORDER BY 1, 2
    ON CONFLICT (workspace_id, host_id) DO UPDATE SET version = v.version + 1;
    RETURN NULL;
END
$$
"""
_TABLES = ("job_gpus", "cluster_hosts", "gpus")


def upgrade() -> None:
    op.create_table(
        "host_allocation_versions",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "workspace_id", "host_id", name=op.f("pk_host_allocation_versions")
        ),
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
    op.drop_table("host_allocation_versions")
