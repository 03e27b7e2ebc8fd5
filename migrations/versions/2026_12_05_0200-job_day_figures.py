"""job day figures: the job figures per UTC day, and the days whose hours changed

`job_day_figures` holds job_hour_figures summed per (job, GPU, UTC day) for closed days,
so a month's jobs report reads about 24 times fewer rows. One statement-level trigger
per event on job_hour_figures marks the UTC days a statement touched in
`job_dirty_days` (as the rollups' "day rollups refresh" does for theirs); the jobs
report reads hours for marked days, and the maintenance schedule recomputes closed
marked days (board.jobs.days.refresh_job_days). Every day with figures already stored is
marked here, so the first refresh builds its day rows.

Revision ID: f74a5b6c8d94
Revises: e63f4a5b7c83
Create Date: 2026-12-05 02:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f74a5b6c8d94"
down_revision: str | None = "e63f4a5b7c83"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EVENTS = (
    ("insert", "NEW TABLE AS new_rows"),
    ("update", "NEW TABLE AS new_rows"),
    ("delete", "OLD TABLE AS old_rows"),
)

# DO NOTHING on a day already marked takes no row lock, so concurrent batches of one
# workspace never queue on their shared "today" mark; new marks go in key order.
MARK_DIRTY = """
CREATE FUNCTION job_days_mark_dirty() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO job_dirty_days (workspace_id, day_start)
        SELECT DISTINCT workspace_id, date_trunc('day', hour_start, 'UTC') FROM old_rows
        ORDER BY 1, 2
        ON CONFLICT DO NOTHING;
    ELSE
        INSERT INTO job_dirty_days (workspace_id, day_start)
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
        "job_day_figures",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("gpu_id", sa.BigInteger(), nullable=False),
        sa.Column("day_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("covered_us", sa.BigInteger(), nullable=False),
        sa.Column("active_us", sa.BigInteger(), nullable=False),
        sa.Column("idle_held_us", sa.BigInteger(), nullable=False),
        sa.Column("foreign_us", sa.BigInteger(), nullable=False),
        sa.Column("unused_us", sa.BigInteger(), nullable=False),
        sa.Column("util_pct_us", sa.BigInteger(), nullable=False),
        sa.Column("max_memory_used_mb", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id", "job_id"],
            ["scheduler_jobs.workspace_id", "scheduler_jobs.id"],
            name=op.f("fk_job_day_figures_workspace_id_job_id_scheduler_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "workspace_id", "job_id", "gpu_id", "day_start", name=op.f("pk_job_day_figures")
        ),
    )
    op.create_index(
        "ix_job_day_figures_workspace_day",
        "job_day_figures",
        ["workspace_id", "day_start"],
        unique=False,
    )
    op.create_table(
        "job_dirty_days",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("day_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "marked_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.PrimaryKeyConstraint("workspace_id", "day_start", name=op.f("pk_job_dirty_days")),
    )
    op.execute(MARK_DIRTY)
    for event, referencing in EVENTS:
        op.execute(
            f"CREATE TRIGGER job_hour_figures_mark_days_{event} AFTER {event.upper()} "
            f"ON job_hour_figures REFERENCING {referencing} FOR EACH STATEMENT "
            "EXECUTE FUNCTION job_days_mark_dirty()"
        )
    op.execute(
        "INSERT INTO job_dirty_days (workspace_id, day_start) "
        "SELECT DISTINCT workspace_id, date_trunc('day', hour_start, 'UTC') "
        "FROM job_hour_figures ORDER BY 1, 2"
    )


def downgrade() -> None:
    for event, _ in EVENTS:
        op.execute(f"DROP TRIGGER IF EXISTS job_hour_figures_mark_days_{event} ON job_hour_figures")
    op.execute("DROP FUNCTION IF EXISTS job_days_mark_dirty()")
    op.drop_table("job_dirty_days")
    op.drop_index("ix_job_day_figures_workspace_day", table_name="job_day_figures")
    op.drop_table("job_day_figures")
