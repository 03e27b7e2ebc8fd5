"""Channel secrets at rest: sealed with AES-GCM under a key derived from the board's secret.

A webhook's signing secret must be kept in a form that can sign again (unlike API
tokens, which are only ever compared, and so kept as digests). Sealing them means a copy
of the database alone (a backup, a replica) does not reveal them; the board's secret key
(GUA_BOARD_SECRET_KEY, or the generated one in the data directory) is needed too.
"""

from __future__ import annotations

import hashlib
import os

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_CONTEXT = b"gua-board notice channel secrets v1"


def _key(board_secret: str) -> bytes:
    return hashlib.sha256(_CONTEXT + b"\x00" + board_secret.encode()).digest()


def seal(board_secret: str, value: str) -> bytes:
    nonce = os.urandom(12)
    return nonce + AESGCM(_key(board_secret)).encrypt(nonce, value.encode(), _CONTEXT)


def unseal(board_secret: str, sealed: bytes) -> str:
    """The value; raises when the board's secret key changed since it was sealed."""
    return AESGCM(_key(board_secret)).decrypt(sealed[:12], sealed[12:], _CONTEXT).decode()
