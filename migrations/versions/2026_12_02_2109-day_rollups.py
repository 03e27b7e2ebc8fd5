"""day rollups

Per-UTC-day sums of the hourly rollups, kept by triggers. Reports over long windows
read whole UTC days from these tables instead of 24 hour rows each (bench/reports.py).
Statement-level AFTER triggers with transition tables on the hourly tables add each
statement's net change to the day rows in the same transaction, so every path that
changes hourly rollups (ingest upserts, rebuild, retention) keeps the days exact
without knowing about them.

Revision ID: ee1abd66f0b9
Revises: e2af23eff986
Create Date: 2026-12-02 21:09:51.250333
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "ee1abd66f0b9"
down_revision: str | None = "e2af23eff986"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GPU_SUMS = (
    "covered_us",
    "active_us",
    "idle_held_us",
    "idle_us",
    "util_pct_us",
    "memory_used_mb_us",
    "memory_total_mb_us",
    "sample_count",
)
USER_SUMS = ("held_us", "active_us", "idle_held_us")
# hour table, day table, key columns before the day, summed columns
TABLES = (
    ("gpu_hour_rollups", "gpu_day_rollups", ("workspace_id", "gpu_id"), GPU_SUMS),
    ("user_hour_rollups", "user_day_rollups", ("workspace_id", "gpu_id", "linux_user"), USER_SUMS),
)


def _apply(day: str, keys: tuple[str, ...], sums: tuple[str, ...], source: str) -> str:
    """One upsert adding the signed hour rows of `source` (a subquery) to their days."""
    columns = ", ".join((*keys, "day_start", "host_id", *sums))
    group = ", ".join(str(i + 1) for i in range(len(keys) + 1))
    summed = ", ".join(f"sum({s})" for s in sums)
    updates = ", ".join(f"{s} = d.{s} + EXCLUDED.{s}" for s in sums)
    return f"""
        INSERT INTO {day} AS d ({columns})
        SELECT {", ".join(keys)}, date_trunc('day', hour_start, 'UTC'), max(host_id), {summed}
        FROM {source} AS c
        GROUP BY {group}
        ON CONFLICT ({", ".join((*keys, "day_start"))}) DO UPDATE SET {updates};"""


def _function(hour: str, day: str, keys: tuple[str, ...], sums: tuple[str, ...]) -> str:
    plain = ", ".join((*keys, "hour_start", "host_id", *sums))
    negated = ", ".join((*keys, "hour_start", "host_id", *(f"-{s} AS {s}" for s in sums)))
    inserted = _apply(day, keys, sums, "new_rows")
    updated = _apply(
        day,
        keys,
        sums,
        f"(SELECT {plain} FROM new_rows UNION ALL SELECT {negated} FROM old_rows)",
    )
    deleted = _apply(day, keys, sums, f"(SELECT {negated} FROM old_rows)")
    return f"""
    CREATE FUNCTION {day}_apply() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN {inserted}
        ELSIF TG_OP = 'UPDATE' THEN {updated}
        ELSE {deleted}
        END IF;
        RETURN NULL;
    END
    $$;
    """


def upgrade() -> None:
    op.create_table(
        "gpu_day_rollups",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("gpu_id", sa.BigInteger(), nullable=False),
        sa.Column("day_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("covered_us", sa.BigInteger(), nullable=False),
        sa.Column("active_us", sa.BigInteger(), nullable=False),
        sa.Column("idle_held_us", sa.BigInteger(), nullable=False),
        sa.Column("idle_us", sa.BigInteger(), nullable=False),
        sa.Column("util_pct_us", sa.BigInteger(), nullable=False),
        sa.Column("memory_used_mb_us", sa.BigInteger(), nullable=False),
        sa.Column("memory_total_mb_us", sa.BigInteger(), nullable=False),
        sa.Column("sample_count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "workspace_id", "gpu_id", "day_start", name=op.f("pk_gpu_day_rollups")
        ),
    )
    op.create_index(
        "ix_gpu_day_rollups_workspace_day",
        "gpu_day_rollups",
        ["workspace_id", "day_start"],
        unique=False,
    )
    op.create_table(
        "user_day_rollups",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("gpu_id", sa.BigInteger(), nullable=False),
        sa.Column("linux_user", sa.Text(), nullable=False),
        sa.Column("day_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("held_us", sa.BigInteger(), nullable=False),
        sa.Column("active_us", sa.BigInteger(), nullable=False),
        sa.Column("idle_held_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "workspace_id", "gpu_id", "linux_user", "day_start", name=op.f("pk_user_day_rollups")
        ),
    )
    op.create_index(
        "ix_user_day_rollups_workspace_day",
        "user_day_rollups",
        ["workspace_id", "day_start"],
        unique=False,
    )
    for hour, day, keys, sums in TABLES:
        op.execute(_function(hour, day, keys, sums))
        for event, referencing in (
            ("INSERT", "NEW TABLE AS new_rows"),
            ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
            ("DELETE", "OLD TABLE AS old_rows"),
        ):
            op.execute(
                f"CREATE TRIGGER {hour}_to_days_{event.lower()} AFTER {event} ON {hour} "
                f"REFERENCING {referencing} FOR EACH STATEMENT EXECUTE FUNCTION {day}_apply()"
            )
        # Existing hourly rollups, summed once.
        op.execute(_apply(day, keys, sums, hour))


def downgrade() -> None:
    for hour, day, _, _ in TABLES:
        for event in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS {hour}_to_days_{event} ON {hour}")
        op.execute(f"DROP FUNCTION IF EXISTS {day}_apply()")
    op.drop_index("ix_user_day_rollups_workspace_day", table_name="user_day_rollups")
    op.drop_table("user_day_rollups")
    op.drop_index("ix_gpu_day_rollups_workspace_day", table_name="gpu_day_rollups")
    op.drop_table("gpu_day_rollups")
