"""The agent side's one door: bearer token → host → not revoked.

Every agent route goes through here: observations (the hot path), archives (list,
upload, prune) and the live stream's WebSocket. It lives in `ingest` because it is
the agent side's rule, next to the routes that need it on every push; `hosts` only
owns the revoke itself (`board/hosts/service.py: revoke_host`), which tells this
module through `forget_host` — directly in the revoking process, and through a
PostgreSQL notification (`board/hosts/revocation.py`, sent in the revoking
transaction, so it is delivered once and only if that commits) in every other one.

A per-process cache spares the hot path its lookup. It is trusted only while the
stream hub's listener connection is up, and an entry only under the listener epoch
it was filled in (`StreamHub.listener_epoch`): while the listener is down nothing is
cached and every request looks its token up, and after a reconnect — when a
revocation may have been missed — everything cached before is ignored. So a cached
token outlives its host's revocation only by the notification's delivery (well under
a second), or by the listener's probe interval if the listener dies silently. Pushes
re-check `revoked_at` in their transaction anyway (`board/ingest/store.py`).

Open agent WebSockets `watch` their host: a revocation closes them at once; while the
listener is down (or after it reconnected) they look the host up themselves.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from board.auth import routing, tokens
from board.errors import Unauthorized
from board.hosts.revocation import HostKey as HostKey
from board.hosts.revocation import parse_revocation

log = logging.getLogger(__name__)

BAD_TOKEN = "Invalid or missing agent token; enroll the host again if it was revoked."
# An agent token is about 60 characters; a longer bearer value is not one (and is not
# hashed or looked up), whatever size the server let the header be.
MAX_TOKEN_CHARS = 256


@dataclass(frozen=True, slots=True)
class AgentHost:
    workspace_id: int
    host_id: int
    public_id: str

    @property
    def key(self) -> HostKey:
        return (self.workspace_id, self.host_id)


@dataclass(frozen=True, slots=True)
class _Cached:
    host: AgentHost
    epoch: int


class HostWatch:
    """An open connection's interest in its host: `event` is set when something changed."""

    __slots__ = ("event", "revoked")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.revoked = False


class AgentAccess:
    def __init__(
        self, pool: AsyncConnectionPool[Any], listener_epoch: Callable[[], int | None]
    ) -> None:
        self._pool = pool
        self._epoch = listener_epoch
        self._cache: dict[bytes, _Cached] = {}
        # Bumped by every revocation: a lookup that started before one must not cache
        # what it read (it may have read the host just before the revoke committed).
        self._generation = 0
        self._watches: dict[HostKey, set[HostWatch]] = defaultdict(set)

    @property
    def cache(self) -> dict[bytes, _Cached]:
        return self._cache

    async def authenticate(self, authorization: str | None, *, fresh: bool = False) -> AgentHost:
        """The host an agent token belongs to, never revoked; 401 otherwise.

        `fresh` skips the cache: for calls that are rare and act outside the ingest
        transaction's own re-check (archives).
        """
        secret = tokens.bearer(authorization)
        if secret is None or not secret.startswith(tokens.AGENT) or len(secret) > MAX_TOKEN_CHARS:
            raise Unauthorized(BAD_TOKEN)
        digest = tokens.digest(secret)
        epoch = self._epoch()
        if not fresh and epoch is not None:
            cached = self._cache.get(digest)
            if cached is not None and cached.epoch == epoch:
                return cached.host
        generation = self._generation
        host = await self._lookup(digest)
        if host is None:
            self._cache.pop(digest, None)
            raise Unauthorized(BAD_TOKEN)
        if epoch is not None and generation == self._generation and epoch == self._epoch():
            self._cache[digest] = _Cached(host, epoch)
        return host

    async def _lookup(self, digest: bytes) -> AgentHost | None:
        # Routed (board.auth.routing): the token's workspace first, then its host there;
        # only on a cache miss. A revoked host has no route and is re-checked here anyway.
        async with self._pool.connection() as conn:
            workspace_id = await routing.workspace_of(conn, routing.AGENT_TOKEN, digest)
            if workspace_id is None:
                return None
            cur = await conn.execute(
                "SELECT id, public_id FROM hosts "
                "WHERE workspace_id = %s AND agent_token_hash = %s AND revoked_at IS NULL",
                [workspace_id, digest],
            )
            row = await cur.fetchone()
        if row is None:
            return None
        host_id, public_id = row
        return AgentHost(workspace_id, int(host_id), str(public_id))

    async def still_allowed(self, host: AgentHost) -> bool:
        """Whether the host is still not revoked, read from the database now."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT revoked_at IS NULL FROM hosts WHERE workspace_id = %s AND id = %s",
                [host.workspace_id, host.host_id],
            )
            row = await cur.fetchone()
        return bool(row and row[0])

    # -- revocation ----------------------------------------------------------------
    def forget_host(self, workspace_id: int, host_id: int) -> None:
        """The host was revoked: drop its cached token(s), tell its open connections."""
        self._generation += 1
        key = (workspace_id, host_id)
        for digest in [d for d, c in self._cache.items() if c.host.key == key]:
            del self._cache[digest]
        for watch in self._watches.get(key, ()):
            watch.revoked = True
            watch.event.set()

    def on_revocation_notice(self, payload: str) -> None:
        """A revocation NOTIFYed by any process (this one included)."""
        key = parse_revocation(payload)
        if key is None:
            log.warning("agent access: ignoring a malformed revocation notice")
            return
        self.forget_host(*key)

    def listener_changed(self) -> None:
        """The listener went down or came back: notices may have been missed."""
        self._generation += 1
        self._cache.clear()
        for watches in self._watches.values():
            for watch in watches:
                watch.event.set()

    def listening(self) -> bool:
        return self._epoch() is not None

    @contextmanager
    def watch(self, host: AgentHost) -> Iterator[HostWatch]:
        watch = HostWatch()
        self._watches[host.key].add(watch)
        try:
            yield watch
        finally:
            watches = self._watches.get(host.key)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watches[host.key]
