"""The fleet as the pages show it: hosts from the hosts service, GPUs as cards by state.

A card's state is the GPU's `usageState` from its host's newest observation while that
host is fresh (`ok` or `partial`); on a stale host nobody knows what the card does now,
so it is "not observed" and shows its last known values greyed out. That `usageState` is
the counted state (the one the rollups credit), so a busy card whose process list could
not be read counts as active, never as free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from board.hosts.schemas import GpuOut, GpuProcessCountOut, HostOut
from board.rollups.crediting import billed_users, compute_holders

CARD_STATES = ("active", "idle_held", "idle", "not_observed")
FRESH = ("ok", "partial")


@dataclass(frozen=True)
class Card:
    host_id: str
    uuid: str
    index: int
    name: str
    state: str
    util_pct: int | None
    memory_used_mb: int | None
    memory_total_mb: int | None
    temperature_c: int | None
    power_w: int | None
    # None when the viewer may not see processes (finance).
    holders: tuple[str, ...] | None
    process_count: int
    # Why the board derived the state itself (the agent sent no usageState), or None.
    derived: str | None = None

    @property
    def memory_pct(self) -> float | None:
        if not self.memory_total_mb or self.memory_used_mb is None:
            return None
        return 100.0 * self.memory_used_mb / self.memory_total_mb

    def as_json(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "index": self.index,
            "name": self.name,
            "state": self.state,
            "utilPct": self.util_pct,
            "memoryUsedMb": self.memory_used_mb,
            "memoryTotalMb": self.memory_total_mb,
            "holders": list(self.holders) if self.holders is not None else None,
        }


@dataclass(frozen=True)
class HostCards:
    host: HostOut
    cards: list[Card]

    @property
    def host_id(self) -> str:
        return self.host.host_id


@dataclass
class Fleet:
    hosts: list[HostCards]
    counts: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "hosts": [
                {
                    "hostId": h.host_id,
                    "displayName": h.host.display_name,
                    "freshness": h.host.freshness,
                    "gpus": [c.as_json() for c in h.cards],
                }
                for h in self.hosts
            ],
        }


def card_of(host: HostOut, gpu: GpuOut | GpuProcessCountOut) -> Card:
    processes = gpu.processes
    # Who is billed, as the reports show it: a held card naming no compute process
    # (an unreadable process list) is held by `unknown`, not by nobody.
    holders = (
        billed_users(gpu.usage_state, compute_holders((p.linux_user, p.type) for p in processes))
        if processes is not None
        else None
    )
    state = gpu.usage_state if host.freshness in FRESH else "not_observed"
    return Card(
        host_id=host.host_id,
        uuid=gpu.uuid,
        index=gpu.index,
        name=gpu.name,
        state=state,
        util_pct=gpu.util_pct,
        memory_used_mb=gpu.memory_used_mb,
        memory_total_mb=gpu.memory_total_mb,
        temperature_c=gpu.temperature_c,
        power_w=gpu.power_w,
        holders=holders,
        process_count=gpu.process_count,
        derived=_derived(host, gpu, state),
    )


def _derived(host: HostOut, gpu: GpuOut | GpuProcessCountOut, state: str) -> str | None:
    if state == "not_observed" or gpu.reported_usage_state is not None:
        return None
    if host.collection_status == "partial" and not gpu.process_count:
        return "Process list unavailable: state derived"
    return "State derived by the board"


def host_cards(host: HostOut) -> HostCards:
    cards = sorted((card_of(host, g) for g in host.gpus), key=lambda c: (c.index, c.uuid))
    return HostCards(host=host, cards=cards)


def build_fleet(hosts: list[HostOut], state: str = "", host_id: str = "") -> Fleet:
    """Counts over the whole fleet; the host list narrowed to the filters."""
    everything = [host_cards(h) for h in hosts]
    counts = dict.fromkeys(CARD_STATES, 0)
    for h in everything:
        for c in h.cards:
            counts[c.state] += 1
    counts["total"] = sum(counts[s] for s in CARD_STATES)
    counts["hosts"] = len(everything)
    shown: list[HostCards] = []
    for h in everything:
        if host_id and h.host_id != host_id:
            continue
        if state:
            matching = [c for c in h.cards if c.state == state]
            if not matching:
                continue
            h = HostCards(host=h.host, cards=matching)
        shown.append(h)
    return Fleet(hosts=shown, counts=counts)
