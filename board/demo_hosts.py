"""The demo's simulated hosts and their driver: live pushes, the utilization stream, and
the history (board.demo_history) up to the first live push."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from agent import AGENT_VERSION
from agent.fake import FakeCollector
from agent.model import ERROR_NVML_INIT_FAILED, ERROR_PROCESS_LIST_UNAVAILABLE, Collection
from agent.payload import HostIdentity, build_observation
from board.demo_history import FINE_FOR, HISTORY, Span, write_history
from board.demo_story import MailSink
from board.runtime import Runtime

log = logging.getLogger(__name__)

STALE_FOR = timedelta(minutes=10)  # a stale host went quiet this long ago


@dataclass
class SimHost:
    name: str
    role: str
    host_id: str = ""
    agent_token: str = ""
    broken_since: datetime | None = None  # the error role's: from then on, NVML fails
    seen_until: datetime | None = None  # its newest observation before this run

    @property
    def fake(self) -> FakeCollector:
        return FakeCollector(self.name)

    def observation(self, at: datetime) -> dict[str, Any]:
        """What this host's agent sends at `at`: the fake GPUs, or how its role breaks them."""
        identity = HostIdentity(self.name, AGENT_VERSION, self.host_id or None, None)
        if self.role == "error" and (self.broken_since is None or at >= self.broken_since):
            broken = Collection("unknown", (), status="error", errors=(ERROR_NVML_INIT_FAILED,))
            return build_observation(broken, identity, at)
        collection = self.fake.collect(at)
        if self.role == "partial":
            # The last card's process list cannot be read: no processes, no usageState.
            *rest, last = collection.gpus
            unreadable = replace(last, processes=(), processes_ok=False, usage_state=None)
            collection = Collection(
                collection.driver_version,
                (*rest, unreadable),
                status="partial",
                errors=(ERROR_PROCESS_LIST_UNAVAILABLE,),
            )
        return build_observation(collection, identity, at)

    def pushes_live(self) -> bool:
        return self.role in ("ok", "partial", "error")

    def streams(self) -> bool:
        return self.role in ("ok", "partial")

    def history_end(self, now: datetime) -> datetime | None:
        if self.role == "never":
            return None
        return now - STALE_FOR if self.role == "stale" else now


@dataclass
class Demo:
    """A running demo: where it is, who may sign in, and its simulated hosts."""

    url: str
    slug: str
    password: str
    hosts: list[SimHost]
    interval: float
    client: httpx.AsyncClient
    runtime: Runtime | None = None
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    history_written: int = 0
    history_seconds: float = 0.0
    mail: MailSink | None = None
    pushed: int = 0
    failures: list[str] = field(default_factory=list)
    paused: bool = False
    backfilled: asyncio.Event = field(default_factory=asyncio.Event)

    async def push(self, host: SimHost, at: datetime) -> httpx.Response:
        response = await self.client.post(
            "/agent/v1/observations",
            content=json.dumps(host.observation(at)),
            headers={
                "Authorization": f"Bearer {host.agent_token}",
                "Content-Type": "application/json",
            },
        )
        if response.status_code == 202:
            self.pushed += 1
        else:
            self.failures.append(f"{host.name}: HTTP {response.status_code} {response.text}")
        return response

    async def tick(self, at: datetime | None = None) -> None:
        now = at or datetime.now(UTC)
        await asyncio.gather(*(self.push(h, now) for h in self.hosts if h.pushes_live()))

    async def backfill(self, span: timedelta = HISTORY) -> None:
        """The hosts' past, `span` back from the first live push (or from where a former
        run left off) up to it, through the ingest writer (board.demo_history)."""
        try:
            assert self.runtime is not None
            spans = []
            for host in self.hosts:
                end = host.history_end(self.started)
                if end is None:
                    continue
                start = self.started - span
                if host.seen_until is not None:
                    start = max(start, host.seen_until + timedelta(microseconds=1))
                bearer = f"Bearer {host.agent_token}"
                key = (await self.runtime.access.authenticate(bearer)).key
                spans.append(Span(host, key, start, end))
            fine_from = self.started - FINE_FOR
            began = time.monotonic()
            self.history_written = await write_history(self.runtime, spans, fine_from)
            self.history_seconds = time.monotonic() - began
        except Exception as exc:
            log.exception("the demo's history could not be written")
            self.failures.append(f"history: {exc!r}")
        finally:
            self.backfilled.set()

    async def stream(self, host: SimHost) -> None:
        """What agents 1.6+ do beside the pushes: one utilization message a second."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import WebSocketException

        url = self.url.replace("http://", "ws://", 1) + "/agent/v1/stream"
        headers = {"Authorization": f"Bearer {host.agent_token}"}
        while True:
            try:
                async with connect(url, additional_headers=headers) as ws:
                    while True:
                        if not self.paused:
                            now = datetime.now(UTC)
                            gpus = [
                                {
                                    "deviceUuid": g.uuid,
                                    "utilPct": g.util_pct,
                                    "memUsedMb": g.memory_used_mb,
                                }
                                for g in host.fake.collect(now).gpus
                            ]
                            message = {"type": "util", "ts": now.timestamp(), "gpus": gpus}
                            await ws.send(json.dumps(message))
                        await asyncio.sleep(1)
            except (OSError, WebSocketException) as exc:
                log.info("demo stream of %s dropped (%s); reconnecting", host.name, exc)
                await asyncio.sleep(5)

    async def simulate(self) -> None:
        """Push every host's fake telemetry every `interval` seconds until cancelled."""
        while True:
            if not self.paused:
                try:
                    await self.tick()
                except httpx.HTTPError as exc:
                    log.warning("demo push failed: %s", exc)
            await asyncio.sleep(self.interval)
