"""Sign-ins in flight: what the callback must find to accept the provider's answer."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, LargeBinary, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base


class SsoLogin(Base):
    """One started sign-in: single-use (deleted when the callback reads it), short-lived.

    Kept in PostgreSQL so any board process can finish a sign-in another one started.
    `state_hash` is the SHA-256 of the state sent to the provider; `browser_hash` the
    SHA-256 of a random secret kept in a cookie of the browser that started it, so a
    callback URL opened in another browser (a login CSRF) is refused. `client_hash` is
    the digest of the client that started it (service.client_key): the starts not yet
    finished are bounded per client.
    """

    __tablename__ = "sso_logins"

    state_hash: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    browser_hash: Mapped[bytes] = mapped_column(LargeBinary)
    client_hash: Mapped[bytes] = mapped_column(LargeBinary, index=True)
    provider: Mapped[str] = mapped_column(Text)
    nonce: Mapped[str] = mapped_column(Text)
    code_verifier: Mapped[str] = mapped_column(Text)
    next_path: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
