"""One-time enrollment tokens an admin issues for a host."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKey,
    Identity,
    LargeBinary,
    PrimaryKeyConstraint,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base


class EnrollmentToken(Base):
    __tablename__ = "enrollment_tokens"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity())
    # A claim carries no workspace: it is routed by the hash (board.auth.routing), whose
    # route is the one global index; here it is unique within the workspace.
    token_hash: Mapped[bytes] = mapped_column(LargeBinary)
    token_prefix: Mapped[str] = mapped_column(Text)
    display_name: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    claimed_host_id: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "id"),
        UniqueConstraint("workspace_id", "token_prefix"),
        UniqueConstraint("workspace_id", "token_hash"),
    )
