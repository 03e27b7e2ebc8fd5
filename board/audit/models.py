"""The audit log's one table: an event per admin action or sign-in, per workspace."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    PrimaryKeyConstraint,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base


class AuditEvent(Base):
    """Who (user id and email as they were), what (action, target, detail), when, from where.

    The email is copied, not joined: the row must still say who it was after the person is
    removed. No foreign key to users for the same reason.
    """

    __tablename__ = "audit_events"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity())
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    actor_user_id: Mapped[int | None] = mapped_column(BigInteger)
    actor_email: Mapped[str | None] = mapped_column(Text)
    action: Mapped[str] = mapped_column(Text)
    target: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    client_address: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "id"),
        # The page and the API read one workspace's newest events first.
        Index("ix_audit_events_workspace_id_id", "workspace_id", text("id DESC")),
        Index("ix_audit_events_workspace_id_at", "workspace_id", "at"),
    )
