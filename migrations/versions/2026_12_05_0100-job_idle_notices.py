"""job idle notices: how long a job's allocated GPU sits unused or idle-held before its
user is told (jobIdleNoticeMinutes, 60) and before the account's contacts and the admins
are (jobIdleEscalateMinutes, 105)

Revision ID: d52e3f4a6b72
Revises: c41d2e3f5a61
Create Date: 2026-12-05 01:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "d52e3f4a6b72"
down_revision: str | None = "c41d2e3f5a61"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "workspaces",
        sa.Column("job_idle_notice_minutes", sa.Integer(), server_default="60", nullable=False),
    )
    op.add_column(
        "workspaces",
        sa.Column("job_idle_escalate_minutes", sa.Integer(), server_default="105", nullable=False),
    )
    op.create_check_constraint(
        "job_idle_notice_range",
        "workspaces",
        "job_idle_notice_minutes BETWEEN 1 AND 10080 "
        "AND job_idle_escalate_minutes BETWEEN 2 AND 10080 "
        "AND job_idle_escalate_minutes > job_idle_notice_minutes",
    )


def downgrade() -> None:
    op.drop_constraint(op.f("ck_workspaces_job_idle_notice_range"), "workspaces", type_="check")
    op.drop_column("workspaces", "job_idle_escalate_minutes")
    op.drop_column("workspaces", "job_idle_notice_minutes")
