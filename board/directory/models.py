"""The directory: which person and team a Linux account on the hosts belongs to."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    PrimaryKeyConstraint,
    Text,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base


class DirectoryEntry(Base):
    """An admin's link of a Linux user to a member and a team (entered ahead or later).

    When the user was seen is not kept here: it is read from the per-user rollups the
    ingest path writes anyway (docs/adr/0007-reservations.md).
    """

    __tablename__ = "directory_entries"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    linux_user: Mapped[str] = mapped_column(Text)
    user_id: Mapped[int | None] = mapped_column(BigInteger)
    # A plain label; money (cost per team) reads it later.
    team: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "linux_user"),
        # Removing the member unlinks the account, and keeps the team.
        ForeignKeyConstraint(
            ["workspace_id", "user_id"],
            ["memberships.workspace_id", "memberships.user_id"],
            ondelete="SET NULL (user_id)",
        ),
        CheckConstraint("length(linux_user) BETWEEN 1 AND 64", name="linux_user_length"),
        CheckConstraint("team IS NULL OR length(team) BETWEEN 1 AND 100", name="team_length"),
    )


class DirectoryTeam(Base):
    """A team's own row: who is told about it (budget notices go to its contact).

    A team is a label on directory entries; this row only adds what a label cannot hold.
    Teams named by entries need none, and a row names a team no entry uses yet (entered
    ahead, like a Linux user).
    """

    __tablename__ = "directory_teams"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    team: Mapped[str] = mapped_column(Text)
    # Lower case; a person or a list (need not be a member of the workspace).
    contact_email: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "team"),
        CheckConstraint("length(team) BETWEEN 1 AND 100", name="team_length"),
        CheckConstraint(
            "contact_email IS NULL OR length(contact_email) BETWEEN 3 AND 320",
            name="contact_email_length",
        ),
    )


class AccountTeam(Base):
    """A scheduler's (Slurm's) account and the team it belongs to, as an admin set it: a
    job's account names the team its figures count for (docs/jobs.md)."""

    __tablename__ = "account_teams"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    account: Mapped[str] = mapped_column(Text)
    team: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "account"),
        CheckConstraint("length(account) BETWEEN 1 AND 64", name="account_length"),
        CheckConstraint("length(team) BETWEEN 1 AND 100", name="team_length"),
    )
