"""Bearer secrets: a readable kind prefix, a public id, 256 random bits; only SHA-256 kept."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

ENROLL = "gua_enroll_"
AGENT = "gua_agent_"
PAT = "gua_pat_"

_PUBLIC_ID_CHARS = 8


@dataclass(frozen=True)
class IssuedToken:
    secret: str  # shown once, never stored
    prefix: str  # non-secret: kind + public id, safe to show and log
    digest: bytes


def issue(kind: str) -> IssuedToken:
    public_id = secrets.token_hex(_PUBLIC_ID_CHARS // 2)
    secret = f"{kind}{public_id}_{secrets.token_urlsafe(32)}"
    return IssuedToken(secret=secret, prefix=f"{kind}{public_id}", digest=digest(secret))


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer …` header, or None."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()
