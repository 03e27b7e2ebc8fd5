"""the names a GPU was reported under before its current one

Hours are priced by the GPU model they were reported as, not by the name the GPU has
now: a card whose reported name changes no longer reprices its past hours.

Revision ID: a27e1f4a6072
Revises: a26d9e3f5061
Create Date: 2026-12-04 15:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a27e1f4a6072"
down_revision: str | None = "a26d9e3f5061"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gpu_name_history",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("gpu_id", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id", "gpu_id"],
            ["gpus.workspace_id", "gpus.id"],
            name=op.f("fk_gpu_name_history_workspace_id_gpu_id_gpus"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "workspace_id", "gpu_id", "until", name=op.f("pk_gpu_name_history")
        ),
    )


def downgrade() -> None:
    op.drop_table("gpu_name_history")
