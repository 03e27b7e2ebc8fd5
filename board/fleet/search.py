"""Search and sort of the hosts list (`?q=`, `?sort=`), shared by the API and the fleet page.

A query matches a host by its display name or hostname (then all its GPUs are shown),
or a GPU by its model, its UUID or, for roles that may see processes, the Linux user
of one of its processes (then only the matching GPUs are shown). Matching is a
case-insensitive substring test on each word of the query; every word must match.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

from board.fleet.schemas import GpuNow, GpuOut, GpuProcessCountOut, HostNow, HostOut

SortKey = Literal["name", "idle_held", "util", "memory"]
SORT_KEYS: tuple[str, ...] = get_args(SortKey)
MAX_QUERY_CHARS = 200
AnyGpu = GpuOut | GpuProcessCountOut


def _words(query: str) -> list[str]:
    return [w.casefold() for w in query.split()]


def _host_text(host: HostOut) -> str:
    return f"{host.display_name}\n{host.hostname or ''}".casefold()


def _gpu_text(gpu: AnyGpu) -> str:
    users = [p.linux_user for p in gpu.processes or ()]
    return "\n".join([gpu.name, gpu.uuid, *users]).casefold()


def _gpu_now_text(gpu: GpuNow, with_processes: bool) -> str:
    users = [p.linux_user for p in gpu.gpu.processes] if with_processes else []
    return "\n".join([gpu.gpu.name, gpu.gpu.uuid, *users]).casefold()


def search_hosts(hosts: list[HostOut], query: str) -> list[HostOut]:
    """The hosts (and, unless the host itself matches, the GPUs) the query names."""
    words = _words(query)
    if not words:
        return hosts
    found: list[HostOut] = []
    for host in hosts:
        host_text = _host_text(host)
        gpus = [g for g in host.gpus if all(w in host_text or w in _gpu_text(g) for w in words)]
        if all(w in host_text for w in words):
            found.append(host)
        elif gpus:
            found.append(host.model_copy(update={"gpus": gpus}))
    return found


def search_fleet(hosts: list[HostNow], query: str, with_processes: bool) -> list[HostNow]:
    """search_hosts for the fleet page's hosts (board.fleet.service.fleet_hosts): the same
    matches; Linux users only for roles that may see processes (`with_processes`)."""
    words = _words(query)
    if not words:
        return hosts
    found: list[HostNow] = []
    for host in hosts:
        host_text = _host_text(host.host)
        if all(w in host_text for w in words):
            found.append(host)
            continue
        gpus = [
            g
            for g in host.gpus
            if all(w in host_text or w in _gpu_now_text(g, with_processes) for w in words)
        ]
        if gpus:
            found.append(HostNow(host.host, gpus))
    return found


def idle_held_key(gpu: AnyGpu) -> tuple[int, float]:
    """Idle-held GPUs first, the longest idle-held (earliest stateSince) first among them."""
    if gpu.usage_state != "idle_held":
        return (1, 0.0)
    since = gpu.state_since
    return (0, since.timestamp() if since is not None else float("inf"))


def gpu_sort_key(sort: str) -> Callable[[AnyGpu], tuple[float | int | str, ...]]:
    """A key for sorted(): largest utilization or memory first, longest idle-held first."""
    if sort == "idle_held":
        return idle_held_key
    if sort == "util":
        return lambda g: (-(g.util_pct if g.util_pct is not None else -1), g.index)
    if sort == "memory":
        return lambda g: (-(g.memory_used_mb if g.memory_used_mb is not None else -1), g.index)
    return lambda g: (g.index, g.uuid)


def sort_hosts(hosts: list[HostOut], sort: str) -> list[HostOut]:
    """Each host's GPUs in the order; hosts by their first GPU in it (then by name)."""
    if sort not in SORT_KEYS or sort == "name":
        return hosts
    key = gpu_sort_key(sort)
    ordered = [h.model_copy(update={"gpus": sorted(h.gpus, key=key)}) for h in hosts]
    return sorted(
        ordered,
        key=lambda h: (0, key(h.gpus[0]), h.display_name) if h.gpus else (1, (), h.display_name),
    )
