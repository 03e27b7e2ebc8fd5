"""fillfactor for the rows ingest updates in place

Every push updates its host's row and, for each of its GPUs, the hour's GPU, user and
host rollup rows (about 120 times per row and hour at a 30 s tick). With the default
fillfactor of 100 a page has no room for a row's new version, so about a third of those
updates left the page and wrote a new entry in every index of the table. Leaving room on
each page keeps them HOT (heap-only: no index entries): on the write-path bench 93-99 %
of the updates instead of 63-83 %, and the PostgreSQL CPU per observation about 30 %
lower (docs/benchmarks.md, "Ingest: room for in-place updates").

ALTER TABLE … SET (fillfactor) takes a brief lock and rewrites nothing: pages filled
from now on keep the room; existing full pages gain it as their rows are updated or
vacuumed away. Downgrade restores the default.

Revision ID: a24b7c1d3e40
Revises: a23d5f9a2b30
Create Date: 2026-12-04 02:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "a24b7c1d3e40"
down_revision: str | None = "a23d5f9a2b30"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The same values as the models' postgresql_with (board.rollups.models, board.hosts.models).
FILLFACTOR = {
    "hosts": 50,
    "gpu_hour_rollups": 80,
    "user_hour_rollups": 80,
    "host_hour_rollups": 80,
}


def upgrade() -> None:
    for table, fillfactor in FILLFACTOR.items():
        op.execute(f"ALTER TABLE {table} SET (fillfactor = {fillfactor})")


def downgrade() -> None:
    for table in FILLFACTOR:
        op.execute(f"ALTER TABLE {table} RESET (fillfactor)")
