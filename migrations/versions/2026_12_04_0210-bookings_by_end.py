"""bookings found by their end

The ingest batch reads the bookings of its hosts around its points. With an index on
(workspace_id, host_id) alone, PostgreSQL read every booking the host ever had and
filtered the ranges: with a year of daily bookings, 0.75 s per batch of 48 hosts
(bench/bookings_read.py). Indexing the end of the range as well lets the read start
past the bookings that ended before the batch's points (board.reservations.store).

The new index replaces the old one (its first two columns serve the same lookups). The
bookings list, the timeline and the reservations report get the same for the same reason:
an index on (workspace_id, upper(during)) of reservations, which they read by the end
(a sequential scan of every booking of the workspace before).

Revision ID: a25c8d2e4f50
Revises: a24b7c1d3e40
Create Date: 2026-12-04 02:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a25c8d2e4f50"
down_revision: str | None = "a24b7c1d3e40"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_reservation_gpus_host_end",
        "reservation_gpus",
        ["workspace_id", "host_id", sa.text("upper(during)")],
    )
    op.drop_index("ix_reservation_gpus_host", table_name="reservation_gpus")
    op.create_index(
        "ix_reservations_workspace_end", "reservations", ["workspace_id", sa.text("upper(during)")]
    )


def downgrade() -> None:
    op.drop_index("ix_reservations_workspace_end", table_name="reservations")
    op.create_index("ix_reservation_gpus_host", "reservation_gpus", ["workspace_id", "host_id"])
    op.drop_index("ix_reservation_gpus_host_end", table_name="reservation_gpus")
