"""`gua-agent job start|end|send-spool`: Slurm's Prolog and Epilog on a node.

slurmd waits for its Prolog, and a Prolog that fails or hangs drains the node: so
these commands always exit 0 and stop by a hard deadline (a few seconds), whatever the
board does. The record goes into the job spool first, then the spool is sent oldest
first; what the board did not take by the deadline waits there for the agent service,
which sends it after its next accepted snapshot (agent.sender), or for
`gua-agent job send-spool`.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from agent.client import Answer, BoardClient, Timeouts
from agent.config import (
    AgentConfig,
    ConfigError,
    default_config_path,
    default_spool_dir,
    job_spool_dir,
    job_starts_dir,
    load_config,
)
from agent.jobs import (
    STATE_RUNNING,
    JobEnvError,
    StartBook,
    encode_jobs,
    exit_state,
    job_record,
    read_env,
    scontrol_start_time,
)
from agent.jobspool import JobSpool
from agent.logs import redact

log = logging.getLogger(__name__)

ACTIONS = ("start", "end", "send-spool")
# The Prolog's and Epilog's whole budget, and send-spool's (nothing waits on that one).
DEFAULT_TIMEOUT = 5.0
SEND_SPOOL_TIMEOUT = 30.0
# Sending stops this long before the deadline; the watchdog ends the process at it.
_MARGIN = 0.5
# The Epilog asks scontrol for a start time for at most this long.
_SCONTROL_TIMEOUT = 2.0

EXIT_OK = 0
EXIT_LEFT = 75  # send-spool only: records remain (EX_TEMPFAIL)


def add_job_parser(
    sub: Any, config_help: str, duration: Any, cluster_name: Any
) -> argparse.ArgumentParser:
    job = sub.add_parser(
        "job",
        help="Slurm Prolog/Epilog: record a job's start or end on this host (always exits 0)",
    )
    job.add_argument(
        "action",
        choices=ACTIONS,
        help="start (Prolog), end (Epilog), send-spool (send what waits in the job spool)",
    )
    job.add_argument("--config", type=Path, help=config_help)
    job.add_argument("--spool-dir", type=Path, help="the agent's spool directory (as for `run`)")
    job.add_argument(
        "--cluster",
        type=cluster_name,
        help="cluster name when SLURM_CLUSTER_NAME is not set (default: the config's)",
    )
    job.add_argument(
        "--timeout",
        type=duration,
        help=f"hard deadline (default {DEFAULT_TIMEOUT:g}s; send-spool {SEND_SPOOL_TIMEOUT:g}s)",
    )
    return job  # type: ignore[no-any-return]


def run_job(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    """Run `gua-agent job <action>`: 0 for start and end whatever happens."""
    env = os.environ if env is None else env
    hooked = args.action != "send-spool"  # run by slurmd: never fail, never hang
    timeout = args.timeout or (DEFAULT_TIMEOUT if hooked else SEND_SPOOL_TIMEOUT)
    deadline = time.monotonic() + timeout
    watchdog = _Watchdog(timeout) if hooked else None
    previous = _exit_on_sigterm() if hooked else None
    try:
        left = _run(args, env, deadline - min(_MARGIN, timeout / 4))
    except BaseException:  # a Prolog that fails drains the node: nothing gets out
        log.exception("gua-agent job %s failed; Slurm carries on", args.action)
        left = 0
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if args.action == "send-spool" and left:
        return EXIT_LEFT
    return EXIT_OK


def _run(args: argparse.Namespace, env: Mapping[str, str], deadline: float) -> int:
    try:
        config = load_config(args.config or default_config_path())
    except ConfigError as exc:
        log.error("gua-agent job %s: %s; no job record made", args.action, exc)
        return 0
    redact(config.agent_token)
    spool_dir: Path = args.spool_dir or default_spool_dir(config.host_id)
    spool = JobSpool(job_spool_dir(spool_dir))
    unspooled: bytes | None = None
    if args.action in ("start", "end"):
        body = _record_body(args, env, config, spool_dir, deadline)
        if body is None:
            return 0
        try:
            spool.put(body)
        except OSError as exc:
            log.error(
                "the job spool %s cannot be written (%s); sending directly", spool.directory, exc
            )
            unspooled = body
    return _send(config, spool, unspooled, deadline)


def _record_body(
    args: argparse.Namespace,
    env: Mapping[str, str],
    config: AgentConfig,
    spool_dir: Path,
    deadline: float,
) -> bytes | None:
    try:
        job = read_env(env, args.cluster or config.cluster)
    except JobEnvError as exc:
        log.error("gua-agent job %s: %s; no job record made", args.action, exc)
        return None
    book = StartBook(job_starts_dir(spool_dir))
    now = datetime.now(UTC)
    if args.action == "start":
        try:
            book.remember(job, now)
        except OSError as exc:
            log.warning(
                "job %s: start time not kept (%s); the Epilog will ask scontrol", job.job_id, exc
            )
        record = job_record(job, state=STATE_RUNNING, started_at=now, ended_at=None)
        log.info(
            "job %s (run %d) started here on GPUs %s", job.job_id, job.restart_count, list(job.gpus)
        )
        return encode_jobs([record])
    try:
        remembered = book.take(job)
    except OSError:
        remembered = None
    restarts = job.restart_count
    if remembered is not None:
        started, restarts = remembered.started_at, remembered.restart_count
    else:
        budget = min(_SCONTROL_TIMEOUT, deadline - time.monotonic() - 1.0)
        asked = scontrol_start_time(job.job_id, env, budget)
        started = min(asked, now) if asked is not None else now
        log.warning(
            "job %s: no Prolog here remembered its start; %s",
            job.job_id,
            "scontrol's StartTime used" if asked is not None else "sent as starting now",
        )
    record = job_record(
        job, state=exit_state(env), started_at=started, ended_at=now, restart_count=restarts
    )
    log.info("job %s (run %d) ended here: %s", job.job_id, restarts, record["state"])
    return encode_jobs([record])


def _send(config: AgentConfig, spool: JobSpool, unspooled: bytes | None, deadline: float) -> int:
    budget = deadline - time.monotonic()
    if budget <= 0:
        return len(spool)
    timeouts = Timeouts(connect=budget, read=budget)
    with BoardClient(
        config.server_url, agent_token=config.agent_token, timeouts=timeouts
    ) as client:

        def post(body: bytes, budget: float) -> Answer:
            return client.post_jobs(body, budget=budget)

        if unspooled is not None:
            answer = post(unspooled, deadline - time.monotonic())
            if answer.kind != "accepted":
                log.error("job record not sent (%s) and not spooled: lost", answer.message)
        result = spool.drain(post, deadline)
    if result.stopped == "busy":
        log.info("the agent is sending the job spool; %d record(s) wait there", result.left)
    elif result.left:
        log.warning("%d job record(s) wait in %s for the board", result.left, spool.directory)
    return result.left


class _Watchdog:
    """Ends the process with status 0 at the deadline, whatever the main thread is stuck
    in (a DNS lookup, a board that never answers): the record is spooled by then."""

    def __init__(self, seconds: float) -> None:
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    @staticmethod
    def _fire() -> None:
        log.warning("gua-agent job: deadline reached; leaving (records stay spooled)")
        _leave()


def _exit_on_sigterm() -> Any:
    """slurmd's timeout sends SIGTERM: leave with 0, as at the deadline."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handle(_signum: int, _frame: FrameType | None) -> None:
        _leave()

    return signal.signal(signal.SIGTERM, handle)


def _leave() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(EXIT_OK)
