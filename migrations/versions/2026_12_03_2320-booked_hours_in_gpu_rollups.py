"""booked hours in GPU rollups

A booking's figures for the UTC hours wholly inside it move into the GPU-hour rollup
row (booked_covered_us, booked_used_us, booked_idle_held_us, booked_conflict_us,
booked_unused_us), which ingest upserts for that GPU and hour anyway; its partial first
and last hours stay in reservation_hour_figures (board.reservations.crediting). Bookings
of one GPU never overlap, so such an hour belongs to one booking alone.

Upgrade adds the columns and moves the existing figures of whole hours over (adding to
the GPU-hour row, or creating it with zero rollup sums were it missing); downgrade moves
them back and drops the columns.

Revision ID: a23d5f9a2b30
Revises: a22b4e8f1c20
Create Date: 2026-12-03 23:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a23d5f9a2b30"
down_revision: str | None = "a22b4e8f1c20"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FIGURES = ("covered_us", "used_us", "idle_held_us", "conflict_us", "unused_us")
BOOKED = tuple(f"booked_{name}" for name in FIGURES)
ROLLUP_SUMS = (
    "covered_us",
    "active_us",
    "idle_held_us",
    "idle_us",
    "util_pct_us",
    "memory_used_mb_us",
    "memory_total_mb_us",
    "sample_count",
)

# A figure row of an hour wholly inside its booking's current range.
_WHOLE_HOUR = """
    f.workspace_id = rg.workspace_id AND f.reservation_id = rg.reservation_id
    AND f.gpu_id = rg.gpu_id
    AND lower(rg.during) <= f.hour_start AND f.hour_start + interval '1 hour' <= upper(rg.during)
"""


def upgrade() -> None:
    for name in BOOKED:
        op.add_column(
            "gpu_hour_rollups",
            sa.Column(name, sa.BigInteger(), server_default="0", nullable=False),
        )
    booked = ", ".join(BOOKED)
    summed = ", ".join(f"f.{name}" for name in FIGURES)
    zeros = ", ".join("0" for _ in ROLLUP_SUMS)
    added = ", ".join(f"{name} = r.{name} + EXCLUDED.{name}" for name in BOOKED)
    op.execute(
        f"""
        INSERT INTO gpu_hour_rollups AS r (workspace_id, gpu_id, hour_start, host_id,
            {", ".join(ROLLUP_SUMS)}, {booked})
        SELECT f.workspace_id, f.gpu_id, f.hour_start, rg.host_id, {zeros}, {summed}
        FROM reservation_hour_figures f JOIN reservation_gpus rg ON {_WHOLE_HOUR}
        ORDER BY f.workspace_id, f.gpu_id, f.hour_start
        ON CONFLICT (workspace_id, gpu_id, hour_start) DO UPDATE SET {added}
        """
    )
    op.execute(
        f"DELETE FROM reservation_hour_figures f USING reservation_gpus rg WHERE {_WHOLE_HOUR}"
    )


def downgrade() -> None:
    figures = ", ".join(FIGURES)
    booked = ", ".join(f"g.{name}" for name in BOOKED)
    added = ", ".join(f"{name} = f.{name} + EXCLUDED.{name}" for name in FIGURES)
    op.execute(
        f"""
        INSERT INTO reservation_hour_figures AS f (workspace_id, reservation_id, gpu_id,
            hour_start, {figures})
        SELECT rg.workspace_id, rg.reservation_id, rg.gpu_id, g.hour_start, {booked}
        FROM gpu_hour_rollups g
        JOIN reservation_gpus rg ON rg.workspace_id = g.workspace_id AND rg.gpu_id = g.gpu_id
         AND lower(rg.during) <= g.hour_start
         AND g.hour_start + interval '1 hour' <= upper(rg.during)
        WHERE ({", ".join(f"g.{name}" for name in BOOKED)}) <> ({", ".join("0" for _ in BOOKED)})
        ON CONFLICT (workspace_id, reservation_id, gpu_id, hour_start) DO UPDATE SET {added}
        """
    )
    for name in reversed(BOOKED):
        op.drop_column("gpu_hour_rollups", name)
