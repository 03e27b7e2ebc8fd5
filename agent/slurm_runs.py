"""What the bridge knows of each job run, and the records it owes the board.

A *run* is (cluster, Slurm's own job id, restart count): a requeued job runs again under
the same id with a higher restart count, and the board keeps each run apart. The state
is one JSON file in the state directory: per run, the record as it should be on the
board, a digest of the record the board last accepted, and when squeue last showed it
live. A record whose digest differs is owed; nothing else is sent, except everything
again every `full_every` seconds (records are idempotent on the board). The file is the
queue while the board is down: at most one record per run, MAX_RUNS runs.

Ends the bridge does not see (decided here, documented in docs/slurm.md):

- A live run's squeue `end_time` is its time limit, never an end: `endedAt` stays null.
- A run that vanished from squeue while live (it ended and MinJobAge passed while the
  bridge was down, or between two polls) is closed with state `UNKNOWN_END` and
  `endedAt` = the last poll that saw it live: the board then counts no allocated time
  the bridge did not see.
- squeue lists no GPUs for an ended job: its record carries the ones the bridge saw
  while it ran (none when it never saw it live; the board then keeps what it knew).
- A requeued run (the job is back with a higher restart count) is closed with state
  `REQUEUED` and `endedAt` = squeue's end_time while it completes, when that is a real
  time, else the last poll that saw it live.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.fsutil import atomic_write
from agent.slurm_squeue import TERMINAL_STATES, WAITING_STATES, SlurmJob, SqueueListing

log = logging.getLogger(__name__)

STATE_FILE = "slurm-bridge-state.json"
MAX_STATE_BYTES = 256 * 1024 * 1024
MAX_RUNS = 200_000
VANISHED_STATE = "UNKNOWN_END"
REQUEUED_STATE = "REQUEUED"
# squeue's end_time of a completing job is taken as its end if no later than this past
# the poll (clock skew between the controller and the bridge).
_CLOCK_SKEW_S = 300
# A requeue in progress, or states that hold no allocation of their own.
_SKIPPED = WAITING_STATES | {"REQUEUED", "REQUEUE_FED", "REVOKED"}
# The job's processes are done and end_time is the real end, Slurm still cleans up.
_ENDING = frozenset({"COMPLETING", "STAGE_OUT"})

RunKey = tuple[str, str, int]  # (cluster, raw job id, restart count)


@dataclass(slots=True)
class Run:
    record: dict[str, Any]
    sent: str | None = None  # digest of the record the board last accepted
    seen_live_at: int | None = None  # Unix s of the last poll that showed it live
    in_squeue: bool = True

    @property
    def key(self) -> RunKey:
        r = self.record
        return (r["cluster"], r["rawJobId"], r["restartCount"])

    @property
    def is_open(self) -> bool:
        return self.record["endedAt"] is None

    @property
    def owed(self) -> bool:
        return self.sent != digest(self.record)


def digest(record: dict[str, Any]) -> str:
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


class BridgeState:
    """The runs the bridge tracks, loaded from and saved to `directory`."""

    def __init__(self, directory: Path, *, cluster: str | None = None) -> None:
        self.directory = directory
        self.cluster = cluster
        self.runs: dict[RunKey, Run] = {}
        self.last_full_at = 0
        self.skipped_no_cluster = 0

    # ---- persistence ----------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self.directory / STATE_FILE

    def load(self) -> None:
        """Read the state file; a missing, unreadable or foreign one starts afresh (the
        bridge then resends what squeue shows, which the board takes as it is)."""
        try:
            with self.path.open("rb") as fh:
                data = json.loads(fh.read(MAX_STATE_BYTES + 1))
            runs = [_run_from_json(item) for item in data["runs"][:MAX_RUNS]]
            self.last_full_at = int(data.get("lastFullAt", 0))
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            log.warning("state file %s unreadable (%s); starting afresh", self.path, exc)
            return
        self.runs = {run.key: run for run in runs if run is not None}

    def save(self) -> None:
        body = {
            "version": 1,
            "lastFullAt": self.last_full_at,
            "runs": [
                {
                    "record": r.record,
                    "sent": r.sent,
                    "seenLiveAt": r.seen_live_at,
                    "inSqueue": r.in_squeue,
                }
                for r in self.runs.values()
            ],  # fmt: skip
        }
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(body, separators=(",", ":")).encode(), mode=0o600)

    # ---- one poll ---------------------------------------------------------------------

    def observe(self, listing: SqueueListing, now: int) -> None:
        """Take one squeue listing seen at `now` (Unix s) into the runs."""
        present: set[tuple[str, str]] = set()
        for run in self.runs.values():
            run.in_squeue = False
        for job in listing.jobs:
            cluster = self.cluster or job.cluster
            if not cluster:
                self.skipped_no_cluster += 1
                continue
            present.add((cluster, job.raw_job_id))
            self._close_requeued(cluster, job, now)
            self._take(cluster, job, now)
        for run in list(self.runs.values()):
            cluster, raw, _ = run.key
            # squeue reporting errors may have listed only part of the jobs.
            if run.is_open and (cluster, raw) not in present and not listing.errors:
                self._close(run, VANISHED_STATE, run.seen_live_at)
        self._forget_done()

    def _close_requeued(self, cluster: str, job: SlurmJob, now: int) -> None:
        for run in self._open_runs(cluster, job.raw_job_id):
            if run.record["restartCount"] >= job.restart_count:
                continue
            started = _seconds(run.record["startedAt"])
            end = job.end_time if job.state in _ENDING else None
            if end is None or not started <= end <= now + _CLOCK_SKEW_S:
                end = run.seen_live_at
            self._close(run, REQUEUED_STATE, end)
            run.in_squeue = True

    def _take(self, cluster: str, job: SlurmJob, now: int) -> None:
        key = (cluster, job.raw_job_id, job.restart_count)
        known = self.runs.get(key)
        if known is not None:
            known.in_squeue = True
        if job.state in _SKIPPED or job.base_state == "PENDING" or job.start_time is None:
            return
        if known is None and job.state in _ENDING and job.restart_count > 0:
            return  # may be the requeue of a run this bridge never saw live
        if known is None and not (job.asked_for_gpus or job.allocations):
            return  # not a GPU job
        ended_at: int | None = None
        live = True
        if job.state in TERMINAL_STATES:
            live = False
            ended_at = job.end_time
            if ended_at is None or ended_at < job.start_time:
                ended_at = known.seen_live_at if known is not None else None
            if known is None and (ended_at is None or ended_at <= job.start_time):
                return  # ended before the bridge saw it, with no time allocated
            ended_at = ended_at if ended_at is not None else job.start_time
        elif job.state in _ENDING:
            end = job.end_time
            if end is not None and job.start_time <= end <= now + _CLOCK_SKEW_S:
                live, ended_at = False, end
        record = self._record(cluster, job, ended_at)
        if not record["allocations"] and known is not None:
            # squeue forgets an ended job's GPUs: keep sending the ones seen while it ran
            # (the board may not have them yet, if it was down then).
            record["allocations"] = known.record["allocations"]
        run = known or Run(record)
        run.record, run.in_squeue = record, True
        if live:
            run.seen_live_at = now
        self.runs[key] = run

    def _record(self, cluster: str, job: SlurmJob, ended_at: int | None) -> dict[str, Any]:
        assert job.start_time is not None
        return {
            "cluster": cluster,
            "jobId": job.job_id,
            "rawJobId": job.raw_job_id,
            "restartCount": job.restart_count,
            "user": job.user,
            "account": job.account,
            "partition": job.partition,
            "name": job.name,
            "state": job.state,
            "startedAt": iso(job.start_time),
            "endedAt": iso(ended_at) if ended_at is not None else None,
            "allocations": [
                {"hostname": node, "gpus": list(gpus)} for node, gpus in job.allocations
            ],
        }

    def _open_runs(self, cluster: str, raw: str) -> list[Run]:
        return [r for r in self.runs.values() if r.is_open and r.key[:2] == (cluster, raw)]

    def _close(self, run: Run, state: str, ended_at: int | None) -> None:
        started = _seconds(run.record["startedAt"])
        end = max(started, ended_at if ended_at is not None else started)
        run.record = {**run.record, "state": state, "endedAt": iso(end)}

    def _forget_done(self) -> None:
        """Drop runs gone from squeue that the board has; past MAX_RUNS, the oldest ended."""
        done = [k for k, r in self.runs.items() if not (r.in_squeue or r.owed or r.is_open)]
        for key in done:
            del self.runs[key]
        excess = len(self.runs) - MAX_RUNS
        if excess > 0:
            ended = sorted(
                (r for r in self.runs.values() if not r.is_open),
                key=lambda r: r.record["endedAt"],
            )
            for run in ended[:excess]:
                del self.runs[run.key]
            log.warning("over %d job runs kept: dropped the %d oldest ended", MAX_RUNS, excess)

    # ---- what to send -------------------------------------------------------------------

    def owed(self, now: int, full_every: int) -> list[Run]:
        """The runs whose record the board does not have; all of them when a full
        resend is due (every `full_every` seconds)."""
        if now - self.last_full_at >= full_every:
            for run in self.runs.values():
                run.sent = None
            self.last_full_at = now
        return [r for r in self.runs.values() if r.owed]

    def mark_sent(self, runs: Iterable[Run]) -> None:
        for run in runs:
            run.sent = digest(run.record)


def _run_from_json(item: Any) -> Run | None:
    record = item.get("record") if isinstance(item, dict) else None
    if not isinstance(record, dict):
        return None
    with contextlib.suppress(KeyError, TypeError, ValueError):
        run = Run(record, item.get("sent"), item.get("seenLiveAt"), bool(item.get("inSqueue")))
        _seconds(record["startedAt"])
        _ = run.key, run.is_open
        return run
    return None
