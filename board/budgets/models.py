"""Budgets' tables: the dated budgets, the notices told per team and period, and when a
workspace's budgets were last looked at (docs/budgets.md)."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Date,
    DateTime,
    ForeignKey,
    Numeric,
    PrimaryKeyConstraint,
    Text,
    Uuid,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base


class Budget(Base):
    """A team's budget per month or per quarter, from the period holding `valid_from` on.

    Dated like prices: a budget holds from its period until the period of the next one
    of the same team and kind, and one set in the middle of a period holds for all of
    it. Both figures null: no budget from that period on.
    """

    __tablename__ = "budgets"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    # The directory's team name as it was written (a renamed team keeps its old budget).
    team: Mapped[str] = mapped_column(Text)
    period_kind: Mapped[str] = mapped_column(Text)
    valid_from: Mapped[date] = mapped_column(Date)
    gpu_hours: Mapped[Decimal | None] = mapped_column(Numeric(15, 6))
    # In the workspace's currency (board/pricing).
    amount: Mapped[Decimal | None] = mapped_column(Numeric(17, 4))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "team", "period_kind", "valid_from"),
        CheckConstraint("length(team) BETWEEN 1 AND 100", name="team_length"),
        CheckConstraint("period_kind IN ('month', 'quarter')", name="period_kind_known"),
        CheckConstraint("gpu_hours IS NULL OR gpu_hours >= 0", name="gpu_hours_not_negative"),
        CheckConstraint("amount IS NULL OR amount >= 0", name="amount_not_negative"),
    )


class BudgetNotice(Base):
    """A budget notice told: at most one of each kind per team and period (the key)."""

    __tablename__ = "budget_notices"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    team: Mapped[str] = mapped_column(Text)
    # "2026-12" or "2026-Q4".
    period: Mapped[str] = mapped_column(Text)
    # "warning" or "exceeded".
    kind: Mapped[str] = mapped_column(Text)
    # The notice's event (a warning passed over by an exceeded notice names that one).
    event_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    told_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "team", "period", "kind"),
        CheckConstraint("kind IN ('warning', 'exceeded')", name="kind_known"),
    )


class BudgetCheck(Base):
    """When a workspace's budgets were last compared with its usage (every few minutes
    at most, whichever board process looks)."""

    __tablename__ = "budget_checks"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    checked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (PrimaryKeyConstraint("workspace_id"),)
