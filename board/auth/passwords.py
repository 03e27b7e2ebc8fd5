"""Password hashing with argon2id, and the gate that bounds how many run at once.

An argon2id check costs ~64 MiB and tens of milliseconds by design. Unbounded, a flood of
sign-ins (unknown emails included) ran one per thread-pool thread and grew a worker by
a gigabyte; the gate lets `concurrency` run and `queue` more wait, and refuses the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

T = TypeVar("T")

_hasher = PasswordHasher()
# Checked against when an email has no password (or no account): same cost as a real check.
_dummy: tuple[PasswordHasher, str] | None = None


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def _dummy_hash() -> str:
    global _dummy
    if _dummy is None or _dummy[0] is not _hasher:
        _dummy = (_hasher, _hasher.hash("not a password anyone has"))
    return _dummy[1]


def verify_password(password_hash: str | None, password: str) -> bool:
    if not password_hash:
        # The same work as a real check, so timing does not tell who has an account.
        verify_password(_dummy_hash(), password)
        return False
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


class PasswordsBusy(Exception):
    """More password checks are running and waiting in this process than the gate allows."""


class PasswordGate:
    """At most `concurrency` argon2 computations at once per process, `queue` more waiting."""

    def __init__(self, concurrency: int, queue: int) -> None:
        self._semaphore = asyncio.Semaphore(concurrency)
        self._limit = concurrency + queue
        self._inside = 0

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        if self._inside >= self._limit:
            raise PasswordsBusy
        self._inside += 1
        try:
            async with self._semaphore:
                future = asyncio.get_running_loop().run_in_executor(None, fn, *args)
                try:
                    return await asyncio.shield(future)
                except asyncio.CancelledError:
                    # The thread runs on: keep its slot until it is done, or the bound leaks.
                    await asyncio.wait({future})
                    raise
        finally:
            self._inside -= 1

    async def verify(self, password_hash: str | None, password: str) -> bool:
        return await self.run(verify_password, password_hash, password)

    async def hash(self, password: str) -> str:
        return await self.run(hash_password, password)
