"""day rollups refresh

The day rollups stop being summed in the ingest transaction (that rewrote the same day
rows on every push and cost ingest about a third more per batch). Instead one cheap
statement-level trigger per hourly table and event marks the UTC days a statement
touched in rollup_dirty_days; reports read hours for marked days, and the maintenance
schedule recomputes closed marked days (board.rollups.daily.refresh_day_rollups).

Revision ID: 4364da0ea18a
Revises: ee1abd66f0b9
Create Date: 2026-12-02 21:37:23.954481
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "4364da0ea18a"
down_revision: str | None = "ee1abd66f0b9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

HOUR_TABLES = ("gpu_hour_rollups", "user_hour_rollups")
EVENTS = (
    ("insert", "NEW TABLE AS new_rows"),
    ("update", "NEW TABLE AS new_rows"),
    ("delete", "OLD TABLE AS old_rows"),
)

# DO NOTHING on a day already marked takes no row lock, so concurrent batches of one
# workspace never queue on their shared "today" mark; new marks go in key order.
MARK_DIRTY = """
CREATE FUNCTION rollup_days_mark_dirty() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO rollup_dirty_days (workspace_id, day_start)
        SELECT DISTINCT workspace_id, date_trunc('day', hour_start, 'UTC') FROM old_rows
        ORDER BY 1, 2
        ON CONFLICT DO NOTHING;
    ELSE
        INSERT INTO rollup_dirty_days (workspace_id, day_start)
        SELECT DISTINCT workspace_id, date_trunc('day', hour_start, 'UTC') FROM new_rows
        ORDER BY 1, 2
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;
"""


def upgrade() -> None:
    op.create_table(
        "rollup_dirty_days",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("day_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "marked_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.PrimaryKeyConstraint("workspace_id", "day_start", name=op.f("pk_rollup_dirty_days")),
    )
    for table in HOUR_TABLES:
        for event, _ in EVENTS:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_to_days_{event} ON {table}")
    op.execute("DROP FUNCTION IF EXISTS gpu_day_rollups_apply()")
    op.execute("DROP FUNCTION IF EXISTS user_day_rollups_apply()")
    op.execute(MARK_DIRTY)
    for table in HOUR_TABLES:
        for event, referencing in EVENTS:
            op.execute(
                f"CREATE TRIGGER {table}_mark_days_{event} AFTER {event.upper()} ON {table} "
                f"REFERENCING {referencing} FOR EACH STATEMENT "
                "EXECUTE FUNCTION rollup_days_mark_dirty()"
            )


def _previous() -> object:
    path = Path(__file__).with_name("2026_12_02_2109-day_rollups.py")
    spec = importlib.util.spec_from_file_location("day_rollups_2109", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def downgrade() -> None:
    for table in HOUR_TABLES:
        for event, _ in EVENTS:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_mark_days_{event} ON {table}")
    op.execute("DROP FUNCTION IF EXISTS rollup_days_mark_dirty()")
    op.drop_table("rollup_dirty_days")
    # Back to day rows summed by triggers: recreate them and recompute every day.
    previous = _previous()
    for hour, day, keys, sums in previous.TABLES:  # type: ignore[attr-defined]
        op.execute(previous._function(hour, day, keys, sums))  # type: ignore[attr-defined]
        for event, referencing in (
            ("INSERT", "NEW TABLE AS new_rows"),
            ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
            ("DELETE", "OLD TABLE AS old_rows"),
        ):
            op.execute(
                f"CREATE TRIGGER {hour}_to_days_{event.lower()} AFTER {event} ON {hour} "
                f"REFERENCING {referencing} FOR EACH STATEMENT EXECUTE FUNCTION {day}_apply()"
            )
        op.execute(f"DELETE FROM {day}")
        op.execute(previous._apply(day, keys, sums, hour))  # type: ignore[attr-defined]
