"""maxSampleGap becomes dated: each value holds from an instant until the next

An interval is judged by the value in force at its opening observation, so a change no
longer re-judges intervals opened before it. The history is two arrays on the workspace
row (read with the host lock on every ingest batch); the value so far holds from the
beginning (a NULL `from`). `max_sample_gap_seconds` stays the value in force now.

Revision ID: a28b3c5d7e91
Revises: a28b4c6d8e10
Create Date: 2026-12-04 18:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "a28b3c5d7e91"
down_revision: str | None = "a28b4c6d8e10"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "workspaces",
        sa.Column(
            "sample_gap_from",
            postgresql.ARRAY(sa.DateTime(timezone=True)),
            server_default=sa.text("'{NULL}'"),
            nullable=False,
        ),
    )
    op.add_column(
        "workspaces",
        sa.Column(
            "sample_gap_seconds",
            postgresql.ARRAY(sa.Integer()),
            server_default=sa.text("'{120}'"),
            nullable=False,
        ),
    )
    op.execute("UPDATE workspaces SET sample_gap_seconds = ARRAY[max_sample_gap_seconds]")
    op.create_check_constraint(
        "sample_gap_history",
        "workspaces",
        "cardinality(sample_gap_seconds) BETWEEN 1 AND 200 "
        "AND cardinality(sample_gap_from) = cardinality(sample_gap_seconds) "
        "AND sample_gap_from[1] IS NULL "
        "AND 1 <= ALL (sample_gap_seconds) AND 86400 >= ALL (sample_gap_seconds) "
        "AND max_sample_gap_seconds = sample_gap_seconds[cardinality(sample_gap_seconds)]",
    )


def downgrade() -> None:
    op.drop_constraint("sample_gap_history", "workspaces", type_="check")
    op.drop_column("workspaces", "sample_gap_seconds")
    op.drop_column("workspaces", "sample_gap_from")
