"""Server-side state of web sign-in: open sessions and failed-attempt counters.

Both live in PostgreSQL so every board process (and replica) agrees: a session ended in
one process is ended in all of them, and guesses are counted once however many workers
answer them.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, ForeignKey, Identity, Integer, LargeBinary, func
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base


class WebSessionRow(Base):
    """A signed-in browser session; the cookie carries a secret whose SHA-256 is kept here."""

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    token_hash: Mapped[bytes] = mapped_column(LargeBinary, unique=True)
    user_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class SignInFailure(Base):
    """Failed sign-ins per key (email and address, or address alone) in a fixed window."""

    __tablename__ = "signin_failures"

    key_hash: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    window_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    failures: Mapped[int] = mapped_column(Integer)
