"""Slurm job records from a node's Prolog and Epilog environment (`gua-agent job`).

slurmd runs the Prolog when it allocates a job to the node (with `PrologFlags=Alloc`)
and the Epilog when the job ends there, both as root with the job's SLURM_* variables
(docs/slurm-notes.md lists them). From those this module builds the record
`POST /agent/v1/jobs` takes, one per run of a job on this host.

The Prolog has no start time and the Epilog's restart count is already the next run's
after a requeue, so the Prolog remembers its run (`StartBook`) and the Epilog pairs
with the last Prolog this node ran for the job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.fsutil import atomic_write, is_temp_name
from agent.procinfo import passwd_name

log = logging.getLogger(__name__)

STATE_RUNNING = "RUNNING"
STATE_COMPLETED = "COMPLETED"
STATE_FAILED = "FAILED"

# Slurm's job ids are 32-bit numbers.
_JOB_ID = re.compile(r"[0-9]{1,10}")
_COUNT = re.compile(r"[0-9]{1,6}")
# A device index as the board takes it (like a GPU's `index`), and at most this many.
MAX_DEVICE = 1023
_MAX_DEVICES = 1024
_TEXT_CHARS = {"cluster": 64, "user": 64, "account": 128, "partition": 128}
# What Slurm's controller scripts write for an empty value (the node's omit it).
_SLURM_NULL = "(null)"
# Where scontrol is looked for when the Prolog's environment has no PATH (slurmd
# gives its scripts none).
_BIN_PATH = "/usr/local/bin:/usr/bin:/bin"
_START_TIME = re.compile(r"(?:^|\s)StartTime=(\S+)")
_SCONTROL_MAX_BYTES = 64 * 1024


class JobEnvError(Exception):
    """The environment is not a Slurm Prolog's or Epilog's: no record can be built."""


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """What a node's Prolog or Epilog environment says about one run of a job."""

    cluster: str
    job_id: str
    restart_count: int
    user: str
    account: str
    partition: str
    gpus: tuple[int, ...]
    exit_code: int | None


def gpu_indexes(text: str | None) -> tuple[int, ...]:
    """SLURM_JOB_GPUS (`0,2`, or a range `0-3`) → (0, 2); anything unreadable → ()."""
    if not text or not text.strip():
        return ()
    found: list[int] = []
    for part in text.strip().split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()) or len(low) > 4 or len(high) > 4:
            log.warning("SLURM_JOB_GPUS=%r is not a list of device indexes; sent as []", text[:80])
            return ()
        first, last = int(low), int(high) if dash else int(low)
        if first > last or last > MAX_DEVICE or len(found) + last - first >= _MAX_DEVICES:
            log.warning("SLURM_JOB_GPUS=%r is out of range; sent as []", text[:80])
            return ()
        found.extend(range(first, last + 1))
    return tuple(dict.fromkeys(found))


def exit_state(env: Mapping[str, str]) -> str:
    """An Epilog's job state: COMPLETED when the job's exit code is 0, else FAILED.

    SLURM_JOB_EXIT_CODE is the batch script's wait status (256 for `exit 1`, 9 for a
    SIGKILL); SLURM_JOB_DERIVED_EC, the highest of its steps', stands in when it is
    missing. With neither the run ended as far as the node can tell: COMPLETED."""
    for key in ("SLURM_JOB_EXIT_CODE", "SLURM_JOB_DERIVED_EC"):
        value = env.get(key, "").strip()
        if value.isdigit() and len(value) <= 12:
            return STATE_COMPLETED if int(value) == 0 else STATE_FAILED
    return STATE_COMPLETED


def read_env(env: Mapping[str, str], fallback_cluster: str | None = None) -> SlurmJob:
    """The job this Prolog or Epilog runs for; JobEnvError when there is none to name."""
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    if _JOB_ID.fullmatch(job_id) is None:
        raise JobEnvError(f"SLURM_JOB_ID is {job_id[:40]!r}, not a Slurm job id")
    cluster = _clean(env.get("SLURM_CLUSTER_NAME", ""), "cluster") or (fallback_cluster or "")
    if not cluster:
        raise JobEnvError("SLURM_CLUSTER_NAME is not set and the config names no cluster")
    restarts = env.get("SLURM_JOB_RESTART_COUNT", "0").strip()
    user = _clean(env.get("SLURM_JOB_USER", ""), "user")
    if not user:
        uid = env.get("SLURM_JOB_UID", "").strip()
        user = (passwd_name(int(uid)) if uid.isdigit() and len(uid) <= 10 else None) or "unknown"
    exit_code = env.get("SLURM_JOB_EXIT_CODE", "").strip()
    return SlurmJob(
        cluster=cluster,
        job_id=str(int(job_id)),
        restart_count=int(restarts) if _COUNT.fullmatch(restarts) else 0,
        user=user,
        account=_clean(env.get("SLURM_JOB_ACCOUNT", ""), "account"),
        partition=_clean(env.get("SLURM_JOB_PARTITION", ""), "partition"),
        gpus=gpu_indexes(env.get("SLURM_JOB_GPUS")),
        exit_code=int(exit_code) if exit_code.isdigit() and len(exit_code) <= 12 else None,
    )


def job_record(
    job: SlurmJob,
    *,
    state: str,
    started_at: datetime,
    ended_at: datetime | None,
    restart_count: int | None = None,
) -> dict[str, Any]:
    """The record `POST /agent/v1/jobs` takes for this run on this host.

    The node cannot tell an array task's `123_4` (its environment has no array ids), nor
    the job's name: `jobId` is the raw id, `name` empty; a bridge on the controller
    knows both."""
    return {
        "cluster": job.cluster,
        "jobId": job.job_id,
        "rawJobId": job.job_id,
        "restartCount": job.restart_count if restart_count is None else restart_count,
        "user": job.user,
        "account": job.account,
        "partition": job.partition,
        "name": "",
        "state": state,
        "startedAt": _instant(started_at),
        "endedAt": None if ended_at is None else _instant(ended_at),
        "gpus": list(job.gpus),
    }


def encode_jobs(records: list[dict[str, Any]]) -> bytes:
    """The request body of `POST /agent/v1/jobs`."""
    return json.dumps({"jobs": records}).encode("utf-8")


def _instant(at: datetime) -> str:
    if at.tzinfo is None:
        raise ValueError("job times must be timezone-aware")
    return at.astimezone(UTC).isoformat()


def _clean(value: str, kind: str) -> str:
    text = "".join(ch for ch in value if ch.isprintable()).strip()
    if text == _SLURM_NULL:
        return ""
    return text[: _TEXT_CHARS[kind]]


# --- the Epilog's start time -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RememberedStart:
    """The run a Prolog on this node started: its restart count and start time."""

    restart_count: int
    started_at: datetime


class StartBook:
    """The Prologs' start times on disk, one small file per (cluster, job id, restart
    count), until the Epilog takes them. Bounded: entries of jobs whose Epilog never
    ran (a node that crashed) go after `max_age_s`, and at most `max_entries` are kept."""

    def __init__(
        self, directory: Path, *, max_entries: int = 4096, max_age_s: float = 400 * 86400
    ) -> None:
        self.directory = directory
        self.max_entries = max_entries
        self.max_age_s = max_age_s

    def remember(self, job: SlurmJob, started_at: datetime) -> None:
        """Note a Prolog's run (OSError when the folder cannot be written)."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = {
            "cluster": job.cluster,
            "jobId": job.job_id,
            "restartCount": job.restart_count,
            "startedAt": _instant(started_at),
        }
        name = f"{self._stem(job)}{job.restart_count}.json"
        atomic_write(self.directory / name, json.dumps(data).encode(), mode=0o600)
        self._prune()

    def take(self, job: SlurmJob) -> RememberedStart | None:
        """The last run of `job` a Prolog here remembered, with a restart count no higher
        than the Epilog's (an Epilog of a requeued run already sees the next count), and
        forget it and any older one; None when no Prolog here remembered one."""
        stem = self._stem(job)
        runs: list[tuple[int, Path]] = []
        for name in self._names():
            text = name[len(stem) : -len(".json")]
            if name.startswith(stem) and name.endswith(".json") and _COUNT.fullmatch(text):
                runs.append((int(text), self.directory / name))
        runs.sort()
        eligible = [(count, path) for count, path in runs if count <= job.restart_count]
        if not eligible:
            return None
        count, path = eligible[-1]
        found = self._read(path, job, count)
        for _, older in eligible:
            with contextlib.suppress(OSError):
                older.unlink()
        return found

    def _read(self, path: Path, job: SlurmJob, count: int) -> RememberedStart | None:
        try:
            with path.open("rb") as fh:
                data = json.loads(fh.read(4096))
            started = datetime.fromisoformat(data["startedAt"])
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("remembered start %s cannot be read (%s)", path.name, exc)
            return None
        # The file name is made safe for a file system: check it is this cluster's job.
        if data.get("cluster") != job.cluster or data.get("jobId") != job.job_id:
            return None
        if started.tzinfo is None:
            return None
        return RememberedStart(count, started)

    @staticmethod
    def _stem(job: SlurmJob) -> str:
        safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in job.cluster)
        return f"{safe}.{job.job_id}."

    def _names(self) -> list[str]:
        try:
            return os.listdir(self.directory)
        except OSError:
            return []

    def _prune(self) -> None:
        now = time.time()
        dated: list[tuple[float, Path]] = []
        for name in self._names():
            path = self.directory / name
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue
            if now - mtime > (3600 if is_temp_name(name) else self.max_age_s):
                with contextlib.suppress(OSError):
                    path.unlink()
            elif not is_temp_name(name):
                dated.append((mtime, path))
        dated.sort()
        for _, path in dated[: max(0, len(dated) - self.max_entries)]:
            with contextlib.suppress(OSError):
                path.unlink()


def scontrol_start_time(job_id: str, env: Mapping[str, str], timeout: float) -> datetime | None:
    """The job's StartTime from `scontrol show job -o`, or None (no scontrol, no answer in
    `timeout` seconds, no start time). scontrol prints local time without a zone: it is
    read in this node's local zone."""
    path = env.get("PATH") or _BIN_PATH
    scontrol = shutil.which("scontrol", path=f"{path}:{_BIN_PATH}")
    if scontrol is None or timeout <= 0:
        return None
    try:
        done = subprocess.run(
            [scontrol, "show", "job", "-o", job_id],
            env=dict(env),
            capture_output=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("scontrol show job %s failed (%s)", job_id, exc)
        return None
    match = _START_TIME.search(done.stdout[:_SCONTROL_MAX_BYTES].decode("utf-8", "replace"))
    if done.returncode != 0 or match is None:
        return None
    try:
        started = datetime.fromisoformat(match.group(1))
    except ValueError:
        return None  # "Unknown", "None"
    # Naive: the node's local time, as scontrol printed it.
    return started.astimezone(UTC) if started.tzinfo is None else started
