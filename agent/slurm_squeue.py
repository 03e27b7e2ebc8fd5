"""Reading `squeue --json`: the jobs a bridge on the Slurm controller reports.

Accepts the shapes of Slurm 22.05 (openapi v0.0.38: plain numbers, `job_state` a
string) and of 23.02+ (v0.0.39 to v0.0.41: numbers as `{"set", "infinite",
"number"}`, `job_state` a list of a base state and flags, 24.05's
`job_resources.nodes.allocation[].name`). Everything in the output is hostile: its
size is capped before parsing, a job that does not have the expected shape is passed
over (and counted), and every string is bounded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_OUTPUT_BYTES = 256 * 1024 * 1024
MAX_JOBS = 1_000_000
MAX_NODES_PER_JOB = 10_000
MAX_GPUS_PER_NODE = 1024
# What a record may carry (a longer name is cut; a longer id is not a Slurm id).
MAX_ID_CHARS = 64
MAX_NAME_CHARS = 255
MAX_FIELD_CHARS = 128

# Slurm's job_state_string(): a flag, when set, is what squeue prints, else the base.
_FLAG_ORDER = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
)
BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
# A job that ended: squeue's end_time is the real end.
TERMINAL_STATES = frozenset(BASE_STATES - {"PENDING", "RUNNING", "SUSPENDED"})
# Waiting, holding no node: nothing to report.
WAITING_STATES = frozenset({"PENDING", "REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD"})

_GRES_ENTRY = re.compile(r"gpu(?::[^:(),]+)?:\d+\(IDX:([0-9,\-]+)\)")
_TRES_KEYS = (
    "tres_per_node",
    "tres_per_job",
    "tres_per_socket",
    "tres_per_task",
    "tres_req_str",
    "tres_alloc_str",
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class SqueueError(Exception):
    """squeue's output cannot be read at all; the message says why (one line)."""


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job as squeue lists it, reduced to what a record needs."""

    raw_job_id: str
    job_id: str  # "<array>_<task>" for an array task, else the raw id
    restart_count: int
    cluster: str
    user: str
    account: str
    partition: str
    name: str
    state: str  # as squeue (22.05) prints it: a flag such as COMPLETING wins
    base_state: str  # the base state where the output says it (23.02+), else `state`
    start_time: int | None
    end_time: int | None
    allocations: tuple[tuple[str, tuple[int, ...]], ...]  # (node, GRES IDX) per node
    asked_for_gpus: bool


@dataclass(slots=True)
class SqueueListing:
    jobs: list[SlurmJob] = field(default_factory=list)
    release: str = ""
    skipped: int = 0  # entries that were not a readable job
    errors: list[str] = field(default_factory=list)  # squeue's own `errors`, bounded


def parse_squeue(output: bytes) -> SqueueListing:
    """The jobs of one `squeue --json` output; SqueueError if it is not one at all."""
    if len(output) > MAX_OUTPUT_BYTES:
        raise SqueueError(f"squeue's output is over {MAX_OUTPUT_BYTES // 2**20} MiB; refused")
    try:
        data = json.loads(output)
    except (ValueError, UnicodeDecodeError, RecursionError, MemoryError) as exc:
        raise SqueueError(f"squeue's output is not JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise SqueueError("squeue's output has no list of jobs")
    entries: list[Any] = data["jobs"]
    if len(entries) > MAX_JOBS:
        raise SqueueError(f"squeue listed over {MAX_JOBS} jobs; refused")
    listing = SqueueListing(release=_release(data.get("meta")))
    errors = data.get("errors")
    if isinstance(errors, list):
        listing.errors = [_error_text(e) for e in errors[:5]]
    for entry in entries:
        job = parse_job(entry) if isinstance(entry, dict) else None
        if job is None:
            listing.skipped += 1
        else:
            listing.jobs.append(job)
    return listing


def parse_job(entry: Mapping[str, Any]) -> SlurmJob | None:
    """One entry of `jobs`, or None when it lacks an id, a user or a state."""
    raw = number(entry.get("job_id"))
    state, base = job_state(entry.get("job_state"))
    user = text(entry.get("user_name"), MAX_FIELD_CHARS)
    if raw is None or raw <= 0 or state is None or not user:
        return None
    array_job = number(entry.get("array_job_id"))
    array_task = number(entry.get("array_task_id"))
    if array_job and array_task is not None and array_task >= 0:
        job_id = f"{array_job}_{array_task}"
    else:
        job_id = str(raw)
    return SlurmJob(
        raw_job_id=str(raw),
        job_id=job_id,
        restart_count=max(0, number(entry.get("restart_cnt")) or 0),
        cluster=text(entry.get("cluster"), MAX_FIELD_CHARS),
        user=user,
        account=text(entry.get("account"), MAX_FIELD_CHARS),
        partition=text(entry.get("partition"), MAX_FIELD_CHARS),
        name=text(entry.get("name"), MAX_NAME_CHARS),
        state=state,
        base_state=base,
        start_time=_time(entry.get("start_time")),
        end_time=_time(entry.get("end_time")),
        allocations=allocations(entry.get("gres_detail"), node_names(entry.get("job_resources"))),
        asked_for_gpus=_asks_for_gpus(entry),
    )


def number(value: Any) -> int | None:
    """A Slurm number: plain (22.05) or `{"set": true, "infinite": false, "number": N}`
    (23.02+); None when unset, infinite or not a number."""
    if isinstance(value, dict):
        if value.get("set") is not True or value.get("infinite") is True:
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _time(value: Any) -> int | None:
    seconds = number(value)
    # Unix seconds a datetime can hold; 0 is Slurm's "none".
    return seconds if seconds is not None and 0 < seconds < 253_402_300_800 else None


def job_state(value: Any) -> tuple[str | None, str]:
    """(the state as squeue prints it, the base state). 22.05 gives one string; 23.02+
    a list such as ["RUNNING"] or ["PENDING", "REQUEUED"], printed as the flag."""
    if isinstance(value, str):
        state = text(value, MAX_FIELD_CHARS).upper()
        return (state or None), state
    if isinstance(value, list) and 0 < len(value) <= 64:
        names = [text(v, MAX_FIELD_CHARS).upper() for v in value if isinstance(v, str)]
        base = next((n for n in names if n in BASE_STATES), "")
        flag = next((f for f in _FLAG_ORDER if f in names), None)
        state = flag or base or (names[0] if names else "")
        return (state or None), base or state
    return None, ""


def text(value: Any, limit: int) -> str:
    """A string field, control characters dropped, cut to `limit`; "" when absent."""
    if not isinstance(value, str):
        return ""
    return _CONTROL.sub("", value[: limit * 4])[:limit].strip()


def node_names(resources: Any) -> list[str]:
    """The allocated nodes in order: `allocated_nodes[].nodename` (22.05 to 23.11) or
    `nodes.allocation[].name` (24.05+)."""
    if not isinstance(resources, dict):
        return []
    listed = resources.get("allocated_nodes")
    key = "nodename"
    nodes = resources.get("nodes")
    if not isinstance(listed, list) and isinstance(nodes, dict):
        listed, key = nodes.get("allocation"), "name"
    if not isinstance(listed, list):
        return []
    names = []
    for node in listed[:MAX_NODES_PER_JOB]:
        name = text(node.get(key), MAX_FIELD_CHARS) if isinstance(node, dict) else ""
        names.append(name)
    return names


def allocations(gres_detail: Any, nodes: Sequence[str]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(node, GPU IDX) per node from `gres_detail` (one string per node, in the order of
    the allocated nodes). A node with no GPU entry, or no name, is left out."""
    if not isinstance(gres_detail, list):
        return ()
    out: list[tuple[str, tuple[int, ...]]] = []
    for node, detail in zip(nodes, gres_detail[:MAX_NODES_PER_JOB], strict=False):
        if not node or not isinstance(detail, str):
            continue
        gpus = gpu_indexes(detail)
        if gpus:
            out.append((node, gpus))
    return tuple(out)


def gpu_indexes(detail: str) -> tuple[int, ...]:
    """The GPU IDX of one node's GRES string: `gpu:2(IDX:0-1)`, `gpu:a100:2(IDX:1,3)`,
    several GRES joined by commas (`gpu:1(IDX:0),gpu:v100:1(IDX:2),nic:1(IDX:0)`)."""
    found: set[int] = set()
    for entry in split_outside_parentheses(detail[:4096]):
        match = _GRES_ENTRY.fullmatch(entry.strip())
        if match is None:
            continue  # another GRES, or a count without IDX (`gpu(CNT:2)`)
        for part in match.group(1).split(","):
            low, _, high = part.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                return ()
            first, last = int(low), int(high or low)
            if last < first or last >= MAX_GPUS_PER_NODE:
                return ()
            found.update(range(first, last + 1))
    return tuple(sorted(found))


def split_outside_parentheses(detail: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(detail):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(detail[start:i])
            start = i + 1
    parts.append(detail[start:])
    return parts


def _asks_for_gpus(entry: Mapping[str, Any]) -> bool:
    """Whether the job asked for GPUs (`--gres=gpu…`, `--gpus…`) or holds some."""
    return any(isinstance(v, str) and "gpu" in v[:4096] for v in (entry.get(k) for k in _TRES_KEYS))


def _release(meta: Any) -> str:
    if not isinstance(meta, dict):
        return ""
    slurm = meta.get("Slurm", meta.get("slurm"))  # "slurm" from 23.11 on
    return text(slurm.get("release"), 32) if isinstance(slurm, dict) else ""


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return text(error.get("error") or error.get("description"), 200)
    return text(error, 200)
