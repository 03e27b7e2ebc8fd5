"""energy in the rollups: watts x time by state, per GPU, user, host and day

Each GPU-hour row gains the time whose opening observation reported a power draw
(`energy_covered_us`) and the energy in watt-microseconds (µJ) by the GPU's state; each
user-hour row its share, split like held time. Existing rows get 0 (no energy known),
and the trigger that keeps host hours sums the new columns too.

The history still in raw gets its energy from the raw samples themselves: every
workspace is marked `energy_backfill_until` the next whole hour, and the maintenance
schedule rebuilds its hours before that from raw, a day at a time and newest first
(board.reservations.rebuild.rebuild_hours: rollups and booking figures together), then
clears the mark. Hours older than the raw history keep energyCoveredHours 0.

Revision ID: a29e1e7c0b01
Revises: a28b3c5d7e91
Create Date: 2026-12-04 21:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a29e1e7c0b01"
down_revision: str | None = "a28b3c5d7e91"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GPU_ENERGY = ("energy_covered_us", "active_energy_uws", "idle_held_energy_uws", "idle_energy_uws")
USER_ENERGY = ("energy_held_us", "active_energy_uws", "idle_held_energy_uws")
SUMS_BEFORE = (
    "covered_us",
    "active_us",
    "idle_held_us",
    "idle_us",
    "util_pct_us",
    "memory_used_mb_us",
    "memory_total_mb_us",
    "sample_count",
)


def _add(source: str, sums: tuple[str, ...]) -> str:
    columns = ", ".join(sums)
    summed = ", ".join(f"sum({s})" for s in sums)
    updates = ", ".join(f"{s} = r.{s} + EXCLUDED.{s}" for s in sums)
    return f"""
        INSERT INTO host_hour_rollups AS r (workspace_id, host_id, hour_start, {columns})
        SELECT workspace_id, host_id, hour_start, {summed}
        FROM {source} AS c
        GROUP BY workspace_id, host_id, hour_start
        ORDER BY workspace_id, host_id, hour_start
        ON CONFLICT (workspace_id, host_id, hour_start) DO UPDATE SET {updates};"""


def _function(sums: tuple[str, ...]) -> str:
    """The host-hour trigger function of migration "host hour rollups", over `sums`."""
    keys = "workspace_id, host_id, hour_start"
    plain = ", ".join((keys, *sums))
    negated = ", ".join((keys, *(f"-{s} AS {s}" for s in sums)))
    changed = f"(SELECT {plain} FROM new_rows UNION ALL SELECT {negated} FROM old_rows)"
    return f"""
    CREATE OR REPLACE FUNCTION host_hour_rollups_apply() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN {_add("new_rows", sums)}
        ELSIF TG_OP = 'UPDATE' THEN {_add(changed, sums)}
        ELSE {_add(f"(SELECT {negated} FROM old_rows)", sums)}
        END IF;
        RETURN NULL;
    END
    $$;
    """


def upgrade() -> None:
    for table in ("gpu_hour_rollups", "host_hour_rollups", "gpu_day_rollups"):
        for column in GPU_ENERGY:
            op.add_column(
                table, sa.Column(column, sa.BigInteger(), server_default="0", nullable=False)
            )
    for table in ("user_hour_rollups", "user_day_rollups"):
        for column in USER_ENERGY:
            op.add_column(
                table, sa.Column(column, sa.BigInteger(), server_default="0", nullable=False)
            )
    op.execute(_function(SUMS_BEFORE + GPU_ENERGY))
    op.add_column(
        "workspaces",
        sa.Column("energy_backfill_until", sa.DateTime(timezone=True), nullable=True),
    )
    op.execute(
        "UPDATE workspaces SET energy_backfill_until = "
        "date_trunc('hour', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 hour'"
    )


def downgrade() -> None:
    op.drop_column("workspaces", "energy_backfill_until")
    op.execute(_function(SUMS_BEFORE))
    for table in ("user_hour_rollups", "user_day_rollups"):
        for column in USER_ENERGY:
            op.drop_column(table, column)
    for table in ("gpu_hour_rollups", "host_hour_rollups", "gpu_day_rollups"):
        for column in GPU_ENERGY:
            op.drop_column(table, column)
