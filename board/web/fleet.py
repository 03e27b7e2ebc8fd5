"""The fleet as the pages show it: hosts from the hosts service, GPUs as cards by state.

A card's state is the GPU's `usageState` from its host's newest observation while that
host is fresh (`ok` or `partial`); on a stale host nobody knows what the card does now,
so it is "not observed" and shows its last known values greyed out. That `usageState` is
the counted state (the one the rollups credit), so a busy card whose process list could
not be read counts as active, never as free.

At fleet scale (hundreds of hosts) the page answers a team lead's questions first: the
counts by state and the worst offenders (idle-held longest, from `stateSince`), then
the GPUs grouped by host, user or state, sorted, in cards or one dense row each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from board.fleet.schemas import GpuNow, GpuOut, GpuProcessCountOut, HostNow, HostOut
from board.jobs.live import JobNow, JobNowOut, job_out
from board.reservations.schemas import ReservationOut
from board.rollups.crediting import billed_users, compute_holders

CARD_STATES = ("active", "idle_held", "idle", "not_observed")
FRESH = ("ok", "partial")
GROUPS = {"host": "Host", "user": "User", "state": "State"}
SORTS = {
    "name": "Host and GPU",
    "idle_held": "Idle-held longest",
    "util": "Utilization",
    "memory": "Memory used",
}
VIEWS = {"cards": "Cards", "rows": "Rows", "map": "Heat-map", "live": "Live heat-map"}
# Above this many GPUs the page opens in the dense view unless the URL names one.
CARDS_UP_TO = 48
OFFENDERS = 5
NOBODY = "(nobody)"


def duration(since: datetime | None, now: datetime) -> str:
    """'3 h 10 min', '2 d 4 h', '12 min', 'under 1 min': whole minutes, rounded down."""
    if since is None:
        return ""
    minutes = max(0, int((now - since).total_seconds() // 60))
    if minutes < 1:
        return "under 1 min"
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {mins} min"
    return f"{mins} min"


# slots, not frozen: a fleet page builds 2,400 of them, and a frozen dataclass's __init__
# (one object.__setattr__ per field) costs twice as much. Nothing changes a card once built.
@dataclass(slots=True)
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
    host_name: str = ""
    state_since: datetime | None = None
    # "3 h 10 min" in this state (rendered at the page's minute), "" when unknown.
    state_for: str = ""
    # Against the booking in force now (board.reservations.availability), and that booking.
    availability: str = "not_observed"
    reservation: ReservationOut | None = None
    # The scheduler job allocated the GPU now (board.jobs.live) and "1 h 20 min" in its
    # standing (rendered at the page's minute), "" when unknown.
    job: JobNowOut | None = None
    job_for: str = ""

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


@dataclass(frozen=True)
class CardGroup:
    """A heading (host, Linux user or state) and its GPUs, for the user and state groupings."""

    key: str
    title: str
    cards: list[Card]


@dataclass
class Fleet:
    hosts: list[HostCards]
    counts: dict[str, int] = field(default_factory=dict)
    offenders: list[Card] = field(default_factory=list)
    groups: list[CardGroup] = field(default_factory=list)

    def live_hosts(self) -> list[tuple[str, str, list[str], list[int]]]:
        """The live heat-map's hosts (fleet_live.js draws them): id, name, GPUs by index."""
        return [
            (h.host_id, h.host.display_name, [c.uuid for c in h.cards], [c.index for c in h.cards])
            for h in self.hosts
        ]

    def fingerprint(self) -> list[Any]:
        """Everything the fleet fragments draw, as plain values: equal fingerprints render
        equal fragments, so a refresh can answer 304 without rendering anything."""
        return [
            self.counts,
            # Drawn with their host's name and holders, whether or not a filter lists them.
            [
                (c.host_id, c.uuid, c.host_name, c.index, c.holders, c.state_since)
                for c in self.offenders
            ],
            [g.key for g in self.groups],
            [
                (
                    h.host.host_id,
                    h.host.display_name,
                    h.host.freshness,
                    h.host.errors,
                    h.host.agent_version,
                    [(r.reason, r.count) for r in h.host.rejected_pushes],
                    h.host.last_seen_at.isoformat() if h.host.last_seen_at else None,
                    [
                        (
                            c.uuid,
                            c.index,
                            c.name,
                            c.state,
                            c.util_pct,
                            c.memory_used_mb,
                            c.memory_total_mb,
                            c.temperature_c,
                            c.power_w,
                            c.holders,
                            c.process_count,
                            c.derived,
                            c.state_since.isoformat() if c.state_since else None,
                            c.availability,
                            c.reservation.model_dump_json() if c.reservation else None,
                            c.job.model_dump_json() if c.job else None,
                        )
                        for c in h.cards
                    ],
                )
                for h in self.hosts
            ],
        ]

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


def _card(
    host: HostOut,
    gpu: GpuOut | GpuProcessCountOut,
    holders: tuple[str, ...] | None,
    availability: str,
    reservation: ReservationOut | None,
    now: datetime | None,
    job: JobNowOut | None = None,
) -> Card:
    state = gpu.usage_state if host.freshness in FRESH else "not_observed"
    since = gpu.state_since if state != "not_observed" else None
    job_since = job.since if job is not None and job.standing is not None else None
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
        host_name=host.display_name,
        state_since=since,
        state_for=duration(since, now) if now is not None else "",
        availability=availability,
        reservation=reservation,
        job=job,
        # The host page builds its cards without a clock: the job line has one anyway.
        job_for=duration(job_since, now or datetime.now(UTC)),
    )


def _derived(host: HostOut, gpu: GpuOut | GpuProcessCountOut, state: str) -> str | None:
    if state == "not_observed" or gpu.reported_usage_state is not None:
        return None
    if host.collection_status == "partial" and not gpu.process_count:
        return "Process list unavailable: state derived"
    return "State derived by the board"


def card_of(host: HostOut, gpu: GpuOut | GpuProcessCountOut, now: datetime | None = None) -> Card:
    processes = gpu.processes
    # Who is billed, as the reports show it: a held card naming no compute process
    # (an unreadable process list) is held by `unknown`, not by nobody.
    holders = (
        billed_users(gpu.usage_state, compute_holders((p.linux_user, p.type) for p in processes))
        if processes is not None
        else None
    )
    return _card(host, gpu, holders, gpu.availability, gpu.reservation, now, gpu.job)


def card_now(host: HostOut, gpu: GpuNow, with_processes: bool, now: datetime | None) -> Card:
    """card_of for the fleet's read (board.fleet.service.fleet_hosts); holders only for
    roles that may see processes."""
    holders = billed_users(gpu.gpu.usage_state, gpu.holders) if with_processes else None
    job = _job_out(gpu.job, with_processes)
    return _card(host, gpu.gpu, holders, gpu.availability, gpu.reservation, now, job)


def _job_out(job: JobNow | None, with_processes: bool) -> JobNowOut | None:
    # Built only for the few GPUs a job holds (a fleet page builds 2,400 cards).
    return job_out(job, with_processes) if job is not None else None


def _by_index(card: Card) -> tuple[int, str]:
    return (card.index, card.uuid)


def host_cards(host: HostOut, now: datetime | None = None) -> HostCards:
    cards = sorted((card_of(host, g, now) for g in host.gpus), key=_by_index)
    return HostCards(host=host, cards=cards)


def fleet_cards(host: HostNow, with_processes: bool, now: datetime | None) -> HostCards:
    cards = sorted((card_now(host.host, g, with_processes, now) for g in host.gpus), key=_by_index)
    return HostCards(host=host.host, cards=cards)


def card_sort_key(sort: str) -> Callable[[Card], tuple[Any, ...]]:
    """Longest idle-held first; largest utilization or memory first; else host and index."""
    if sort == "idle_held":
        return lambda c: (
            c.state != "idle_held",
            c.state_since.timestamp() if c.state_since else float("inf"),
            c.host_name,
            c.index,
        )
    if sort == "util":
        return lambda c: (-(c.util_pct if c.util_pct is not None else -1), c.host_name, c.index)
    if sort == "memory":
        return lambda c: (-(c.memory_pct if c.memory_pct is not None else -1), c.host_name, c.index)
    return lambda c: (c.host_name, c.host_id, c.index, c.uuid)


def worst_offenders(cards: list[Card], n: int = OFFENDERS) -> list[Card]:
    """The GPUs idle-held the longest (by stateSince), on fresh hosts."""
    held = [c for c in cards if c.state == "idle_held" and c.state_since is not None]
    return sorted(held, key=card_sort_key("idle_held"))[:n]


def _grouped(cards: list[Card], group: str, sort: str) -> list[CardGroup]:
    key = card_sort_key(sort)
    buckets: dict[str, list[Card]] = defaultdict(list)
    if group == "user":
        # Unheld GPUs under "", which no Linux user can be (ingest refuses an empty one):
        # a user named "(nobody)" keeps a group of its own.
        for c in cards:
            for user in c.holders or ("",):
                buckets[user].append(c)
        order = sorted(buckets, key=lambda u: (u == "", u.casefold()))
        return [CardGroup(u, u or NOBODY, sorted(buckets[u], key=key)) for u in order]
    for c in cards:
        buckets[c.state].append(c)
    return [CardGroup(s, s, sorted(buckets[s], key=key)) for s in CARD_STATES if buckets[s]]


def build_fleet(
    hosts: list[HostNow],
    state: str = "",
    host_id: str = "",
    *,
    shown: list[HostNow] | None = None,
    group: str = "host",
    sort: str = "name",
    now: datetime | None = None,
    with_processes: bool = True,
) -> Fleet:
    """Counts and offenders over the whole fleet; the GPUs shown narrowed to the filters.

    `shown`: the hosts a search left (board.fleet.search.search_fleet), else all of `hosts`.
    """
    everything = [fleet_cards(h, with_processes, now) for h in hosts]
    counts = dict.fromkeys(CARD_STATES, 0)
    for h in everything:
        for c in h.cards:
            counts[c.state] += 1
    counts["total"] = sum(counts[s] for s in CARD_STATES)
    counts["hosts"] = len(everything)
    offenders = worst_offenders([c for h in everything for c in h.cards])
    narrowed = everything if shown is None else _searched(everything, shown)
    listed: list[HostCards] = []
    for h in narrowed:
        if host_id and h.host_id != host_id:
            continue
        if state:
            matching = [c for c in h.cards if c.state == state]
            if not matching:
                continue
            h = HostCards(host=h.host, cards=matching)
        listed.append(h)
    if sort != "name":
        key = card_sort_key(sort)
        listed = [HostCards(h.host, sorted(h.cards, key=key)) for h in listed]
        listed.sort(key=lambda h: (0, key(h.cards[0])) if h.cards else (1, (h.host.display_name,)))
    groups = _grouped([c for h in listed for c in h.cards], group, sort) if group != "host" else []
    return Fleet(hosts=listed, counts=counts, offenders=offenders, groups=groups)


def _searched(everything: list[HostCards], shown: list[HostNow]) -> list[HostCards]:
    """The cards already built for the hosts and GPUs a search left (none built twice)."""
    cards = {(h.host_id, c.index, c.uuid): c for h in everything for c in h.cards}
    return [
        HostCards(
            h.host,
            sorted(
                (cards[(h.host.host_id, g.gpu.index, g.gpu.uuid)] for g in h.gpus), key=_by_index
            ),
        )
        for h in shown
    ]
