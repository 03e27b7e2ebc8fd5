"""Failed web sign-ins, counted in PostgreSQL so the limit holds across processes.

Two counters per attempt, each a fixed window of `window_seconds`: one per (email,
client address), allowing `max_failures`, and one per address whatever the email,
allowing `max_per_address` (a guesser spraying many emails). An attempt is counted
*before* its password is checked, in one atomic statement, so concurrent attempts in
several workers cannot all slip under the limit; a success takes its attempt back.
Keys are SHA-256 digests: the table holds no emails or addresses.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool


@dataclass(frozen=True)
class SignInLimits:
    max_failures: int
    max_per_address: int
    window_seconds: int


def _keys(email: str, address: str) -> tuple[bytes, bytes]:
    pair = hashlib.sha256(f"email\x00{email}\x00{address}".encode()).digest()
    alone = hashlib.sha256(f"address\x00{address}".encode()).digest()
    return pair, alone


_COUNT = """
INSERT INTO signin_failures AS f (key_hash, window_start, failures)
VALUES (%(pair)s, now(), 1), (%(alone)s, now(), 1)
ON CONFLICT (key_hash) DO UPDATE SET
    failures = CASE WHEN f.window_start <= now() - make_interval(secs => %(window)s)
                    THEN 1 ELSE f.failures + 1 END,
    window_start = CASE WHEN f.window_start <= now() - make_interval(secs => %(window)s)
                        THEN now() ELSE f.window_start END
RETURNING key_hash, failures,
          ceil(extract(epoch FROM f.window_start + make_interval(secs => %(window)s) - now()))
"""

# A success: the pair's count goes, the address keeps its other attempts.
_TAKE_BACK = """
DELETE FROM signin_failures WHERE key_hash = %(pair)s
"""
_TAKE_BACK_ADDRESS = """
UPDATE signin_failures SET failures = greatest(failures - 1, 0) WHERE key_hash = %(alone)s
"""
# Windows long past, dropped now and then by whoever counts an attempt.
_PRUNE = """
DELETE FROM signin_failures
WHERE window_start < now() - make_interval(secs => %(window)s) AND random() < 0.05
"""


async def count_attempt(
    pool: AsyncConnectionPool[Any], limits: SignInLimits, email: str, address: str
) -> int:
    """Count one attempt; 0 when it may go on, else the seconds until it may be retried."""
    pair, alone = _keys(email, address)
    params = {"pair": pair, "alone": alone, "window": limits.window_seconds}
    async with pool.connection() as conn:
        rows = await (await conn.execute(_COUNT, params)).fetchall()
        await conn.execute(_PRUNE, params)
    retry = 0
    for key, failures, seconds in rows:
        limit = limits.max_failures if bytes(key) == pair else limits.max_per_address
        if failures > limit:
            retry = max(retry, int(seconds or 1), 1)
    return retry


async def succeeded(pool: AsyncConnectionPool[Any], email: str, address: str) -> None:
    pair, alone = _keys(email, address)
    async with pool.connection() as conn:
        await conn.execute(_TAKE_BACK, {"pair": pair})
        await conn.execute(_TAKE_BACK_ADDRESS, {"alone": alone})
