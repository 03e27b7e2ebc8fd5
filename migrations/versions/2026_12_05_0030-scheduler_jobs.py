"""scheduler jobs: runs, their allocated devices, figures per job GPU and hour

A scheduler's job run (`scheduler_jobs`, one row per cluster, raw id and restart count),
the devices it was allocated per host (`job_gpus`, matched to GPUs by minor number or
index when read), the hosts that belong to a cluster, and the figures credited against
each allocated GPU per UTC hour (`job_hour_figures`) and held time outside any job of the
holder (`outside_job_hours`). GPUs gain the minor number our agent reports.

Revision ID: b30c1d2e4f50
Revises: 99145bb5631e
Create Date: 2026-12-05 00:28:55.443822
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "b30c1d2e4f50"
down_revision: str | None = "99145bb5631e"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "outside_job_hours",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("gpu_id", sa.BigInteger(), nullable=False),
        sa.Column("linux_user", sa.Text(), nullable=False),
        sa.Column("hour_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("outside_us", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint(
            "workspace_id", "gpu_id", "linux_user", "hour_start", name=op.f("pk_outside_job_hours")
        ),
    )
    op.create_index(
        "ix_outside_job_hours_workspace_hour",
        "outside_job_hours",
        ["workspace_id", "hour_start"],
        unique=False,
    )
    op.create_table(
        "scheduler_jobs",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("public_id", sa.Uuid(), nullable=False),
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("raw_job_id", sa.Text(), nullable=False),
        sa.Column("restart_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("linux_user", sa.Text(), nullable=False),
        sa.Column("account", sa.Text(), server_default="", nullable=False),
        sa.Column("partition", sa.Text(), server_default="", nullable=False),
        sa.Column("name", sa.Text(), server_default="", nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "recorded_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "ended_at IS NULL OR ended_at >= started_at",
            name=op.f("ck_scheduler_jobs_ends_after_start"),
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_scheduler_jobs_workspace_id_workspaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workspace_id", "id", name=op.f("pk_scheduler_jobs")),
        sa.UniqueConstraint("public_id", name=op.f("uq_scheduler_jobs_public_id")),
        sa.UniqueConstraint(
            "workspace_id",
            "cluster",
            "raw_job_id",
            "restart_count",
            name=op.f("uq_scheduler_jobs_workspace_id_cluster_raw_job_id_restart_count"),
        ),
    )
    op.create_index(
        "ix_scheduler_jobs_workspace_start",
        "scheduler_jobs",
        ["workspace_id", "started_at"],
        unique=False,
    )
    op.create_index(
        "ix_scheduler_jobs_workspace_user",
        "scheduler_jobs",
        ["workspace_id", "linux_user"],
        unique=False,
    )
    op.create_table(
        "cluster_hosts",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id", "host_id"],
            ["hosts.workspace_id", "hosts.id"],
            name=op.f("fk_cluster_hosts_workspace_id_host_id_hosts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workspace_id", "host_id", name=op.f("pk_cluster_hosts")),
    )
    op.create_table(
        "job_gpus",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("device", sa.Integer(), nullable=False),
        sa.Column("during", postgresql.TSTZRANGE(), nullable=False),
        sa.Column("linux_user", sa.Text(), nullable=False),
        sa.CheckConstraint("device >= 0", name=op.f("ck_job_gpus_device_not_negative")),
        sa.ForeignKeyConstraint(
            ["workspace_id", "host_id"],
            ["hosts.workspace_id", "hosts.id"],
            name=op.f("fk_job_gpus_workspace_id_host_id_hosts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id", "job_id"],
            ["scheduler_jobs.workspace_id", "scheduler_jobs.id"],
            name=op.f("fk_job_gpus_workspace_id_job_id_scheduler_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "workspace_id", "job_id", "host_id", "device", name=op.f("pk_job_gpus")
        ),
    )
    op.create_index(
        "ix_job_gpus_host_end",
        "job_gpus",
        ["workspace_id", "host_id", sa.literal_column("upper(during)")],
        unique=False,
    )
    op.create_table(
        "job_hour_figures",
        sa.Column("workspace_id", sa.BigInteger(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("gpu_id", sa.BigInteger(), nullable=False),
        sa.Column("hour_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("covered_us", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("active_us", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("idle_held_us", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("foreign_us", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("unused_us", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("util_pct_us", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("max_memory_used_mb", sa.Integer(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id", "job_id"],
            ["scheduler_jobs.workspace_id", "scheduler_jobs.id"],
            name=op.f("fk_job_hour_figures_workspace_id_job_id_scheduler_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "workspace_id", "job_id", "gpu_id", "hour_start", name=op.f("pk_job_hour_figures")
        ),
    )
    op.create_index(
        "ix_job_hour_figures_workspace_hour",
        "job_hour_figures",
        ["workspace_id", "hour_start"],
        unique=False,
    )
    op.add_column("gpus", sa.Column("minor_number", sa.Integer(), nullable=True))
    op.create_index(
        "ix_gpus_scheduler_device",
        "gpus",
        ["workspace_id", "host_id", sa.literal_column("coalesce(minor_number, gpu_index)")],
        unique=False,
    )
    # Updated by every ingest batch, like the hourly rollups: room for HOT updates.
    for table in ("job_hour_figures", "outside_job_hours"):
        op.execute(f"ALTER TABLE {table} SET (fillfactor = 80)")


def downgrade() -> None:
    op.drop_index("ix_gpus_scheduler_device", table_name="gpus")
    op.drop_column("gpus", "minor_number")
    op.drop_index("ix_job_hour_figures_workspace_hour", table_name="job_hour_figures")
    op.drop_table("job_hour_figures")
    op.drop_index("ix_job_gpus_host_end", table_name="job_gpus")
    op.drop_table("job_gpus")
    op.drop_table("cluster_hosts")
    op.drop_index("ix_scheduler_jobs_workspace_user", table_name="scheduler_jobs")
    op.drop_index("ix_scheduler_jobs_workspace_start", table_name="scheduler_jobs")
    op.drop_table("scheduler_jobs")
    op.drop_index("ix_outside_job_hours_workspace_hour", table_name="outside_job_hours")
    op.drop_table("outside_job_hours")
