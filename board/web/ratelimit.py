"""Failed sign-ins per (email, client address) in a sliding window.

Kept in process memory: it slows down guessing at one worker, which is what it is for;
with N workers a guesser gets at most N times the allowance, still far too few tries to
matter against argon2-hashed passwords. A success clears the count for that pair.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

_MAX_KEYS = 50_000


class SignInLimiter:
    def __init__(
        self,
        max_failures: int,
        window_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.window = window_seconds
        self._clock = clock
        self._failures: dict[tuple[str, str], deque[float]] = {}

    def _recent(self, key: tuple[str, str]) -> deque[float]:
        now = self._clock()
        found = self._failures.get(key)
        if found is None:
            return deque()
        while found and now - found[0] >= self.window:
            found.popleft()
        if not found:
            del self._failures[key]
        return found

    def blocked(self, email: str, address: str) -> bool:
        return len(self._recent((email, address))) >= self.max_failures

    def retry_after(self, email: str, address: str) -> int:
        recent = self._recent((email, address))
        if not recent:
            return 0
        return max(1, int(self.window - (self._clock() - recent[0])) + 1)

    def failed(self, email: str, address: str) -> None:
        if len(self._failures) >= _MAX_KEYS:
            # A flood of distinct keys must not grow memory without bound.
            self._failures.clear()
        self._failures.setdefault((email, address), deque()).append(self._clock())

    def succeeded(self, email: str, address: str) -> None:
        self._failures.pop((email, address), None)
