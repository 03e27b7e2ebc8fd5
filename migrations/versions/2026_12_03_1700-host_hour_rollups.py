"""host hour rollups

Rollups per host and UTC hour: the host's GPU-hour rows summed, so the per-host hourly
report reads one row per host and hour instead of summing its GPUs' rows on every
request. A statement-level trigger on gpu_hour_rollups adds each statement's net change
(new rows minus old rows, per host and hour) in the same transaction, so every writer
(ingest's upserts, rebuild, retention, direct SQL) keeps them exact without knowing about
them. Back-filled here from the GPU-hour rollups that already exist.

Revision ID: a20f0c4e1b01
Revises: 87f01dfd327a
Create Date: 2026-12-03 17:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a20f0c4e1b01"
down_revision: str | None = "87f01dfd327a"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SUMS = (
    "covered_us",
    "active_us",
    "idle_held_us",
    "idle_us",
    "util_pct_us",
    "memory_used_mb_us",
    "memory_total_mb_us",
    "sample_count",
)

EVENTS = (
    ("insert", "NEW TABLE AS new_rows"),
    ("update", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
    ("delete", "OLD TABLE AS old_rows"),
)


def _add(source: str) -> str:
    """One upsert adding the signed GPU-hour rows of `source` to their host hours, in key
    order (concurrent batches never deadlock on each other's host hours)."""
    columns = ", ".join(SUMS)
    summed = ", ".join(f"sum({s})" for s in SUMS)
    updates = ", ".join(f"{s} = r.{s} + EXCLUDED.{s}" for s in SUMS)
    return f"""
        INSERT INTO host_hour_rollups AS r (workspace_id, host_id, hour_start, {columns})
        SELECT workspace_id, host_id, hour_start, {summed}
        FROM {source} AS c
        GROUP BY workspace_id, host_id, hour_start
        ORDER BY workspace_id, host_id, hour_start
        ON CONFLICT (workspace_id, host_id, hour_start) DO UPDATE SET {updates};"""


def _function() -> str:
    keys = "workspace_id, host_id, hour_start"
    plain = ", ".join((keys, *SUMS))
    negated = ", ".join((keys, *(f"-{s} AS {s}" for s in SUMS)))
    changed = f"(SELECT {plain} FROM new_rows UNION ALL SELECT {negated} FROM old_rows)"
    return f"""
    CREATE FUNCTION host_hour_rollups_apply() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN {_add("new_rows")}
        ELSIF TG_OP = 'UPDATE' THEN {_add(changed)}
        ELSE {_add(f"(SELECT {negated} FROM old_rows)")}
        END IF;
        RETURN NULL;
    END
    $$;
    """


def upgrade() -> None:
    op.create_table(
        "host_hour_rollups",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("hour_start", sa.DateTime(timezone=True), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in SUMS),
        sa.PrimaryKeyConstraint(
            "workspace_id", "host_id", "hour_start", name=op.f("pk_host_hour_rollups")
        ),
    )
    op.create_index(
        "ix_host_hour_rollups_workspace_hour",
        "host_hour_rollups",
        ["workspace_id", "hour_start"],
        unique=False,
    )
    columns = ", ".join(SUMS)
    summed = ", ".join(f"sum({s})" for s in SUMS)
    op.execute(
        f"""
        INSERT INTO host_hour_rollups (workspace_id, host_id, hour_start, {columns})
        SELECT workspace_id, host_id, hour_start, {summed}
        FROM gpu_hour_rollups
        GROUP BY workspace_id, host_id, hour_start
        """
    )
    op.execute(_function())
    for event, referencing in EVENTS:
        op.execute(
            f"CREATE TRIGGER gpu_hour_rollups_to_hosts_{event} AFTER {event.upper()} "
            f"ON gpu_hour_rollups REFERENCING {referencing} FOR EACH STATEMENT "
            "EXECUTE FUNCTION host_hour_rollups_apply()"
        )


def downgrade() -> None:
    for event, _ in EVENTS:
        op.execute(f"DROP TRIGGER IF EXISTS gpu_hour_rollups_to_hosts_{event} ON gpu_hour_rollups")
    op.execute("DROP FUNCTION IF EXISTS host_hour_rollups_apply()")
    op.drop_index("ix_host_hour_rollups_workspace_hour", table_name="host_hour_rollups")
    op.drop_table("host_hour_rollups")
