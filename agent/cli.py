"""`gua-agent`: enroll, push-once, run."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

from agent import AGENT_VERSION
from agent.client import BoardClient, EnrollmentError, Timeouts
from agent.config import (
    AgentConfig,
    ConfigError,
    check_writable,
    default_config_path,
    default_spool_dir,
    job_spool_dir,
    load_config,
    normalize_server_url,
    save_config,
    valid_cluster_name,
)
from agent.fake import FakeCollector
from agent.jobcmd import add_job_parser, run_job
from agent.jobspool import JobSpool
from agent.logs import redact, scrub, setup_logging
from agent.nvml import NvmlCollector, load_nvml, probe_driver_version
from agent.payload import HostIdentity
from agent.runner import Collector, Runner, take_snapshot
from agent.sender import HostRevoked, Sender
from agent.slurm_bridge import add_parser as add_slurm_bridge_parser
from agent.slurm_bridge import cmd_slurm_bridge
from agent.spool import DEFAULT_MAX_AGE, DEFAULT_MAX_BYTES, Spool
from agent.stream import UtilStreamer
from agent.units import format_duration, parse_duration, parse_size
from agent.usage import DEFAULT_GRACE_SECONDS, DEFAULT_GRACE_TICKS, UsageTracker

log = logging.getLogger("agent")

EXIT_OK = 0
EXIT_FAILED = 1  # enrollment refused; push-once: the board rejected the snapshot
EXIT_USAGE = 2
EXIT_REVOKED = 3  # the board answered 401: host revoked, re-enroll
EXIT_CONFIG = 4  # config missing, invalid, or in the way of enroll
EXIT_SPOOLED = 75  # push-once: board unreachable, snapshot spooled (EX_TEMPFAIL)

MIN_INTERVAL = 0.2


def _duration(minimum: float = 0.0) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = parse_duration(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {format_duration(minimum)}")
        return value

    return parse


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cluster_name(text: str) -> str:
    if not valid_cluster_name(text):
        raise argparse.ArgumentTypeError("must be 1-64 printable characters without spaces")
    return text


def _positive_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError("must be a whole number >= 0")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gua-agent", description="GUA Board host agent: reports this host's NVIDIA GPUs."
    )
    parser.add_argument("--version", action="version", version=f"gua-agent {AGENT_VERSION}")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    sub = parser.add_subparsers(dest="command", required=True)

    config_help = "config file (default: $GUA_AGENT_CONFIG, /etc/gua-agent/config.json as root, "
    config_help += "else $XDG_CONFIG_HOME/gua-agent/config.json)"

    enroll = sub.add_parser("enroll", help="claim an enrollment token and write the config")
    enroll.add_argument("--server-url", required=True, help="the board, e.g. https://board.example")
    enroll.add_argument(
        "--enrollment-token", required=True, help="the one-time token; `-` reads it from stdin"
    )
    enroll.add_argument("--display-name", help="name to report instead of the board's")
    enroll.add_argument(
        "--cluster",
        type=_cluster_name,
        help="the Slurm cluster (ClusterName) this host is a node of, sent with process job ids",
    )
    enroll.add_argument("--config", type=Path, help=config_help)
    enroll.add_argument("--force", action="store_true", help="replace an existing config")
    enroll.add_argument("--connect-timeout", type=_duration(0.001), default=5.0)
    enroll.add_argument("--read-timeout", type=_duration(0.001), default=30.0)

    for name, text in (
        ("push-once", "collect and push one snapshot, then replay the spool"),
        ("run", "collect and push every --interval until SIGTERM/SIGINT"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--config", type=Path, help=config_help)
        cmd.add_argument("--fake", action="store_true", help="send deterministic fake GPUs")
        cmd.add_argument("--hostname", help="host name to report (default: the system's)")
        cmd.add_argument(
            "--spool-dir",
            type=Path,
            help="spool directory (default: $GUA_AGENT_SPOOL_DIR, else <state dir>/spool/<hostId> "
            "with state dir /var/lib/gua-agent as root, else $XDG_STATE_HOME/gua-agent)",
        )
        cmd.add_argument(
            "--spool-max-size",
            type=_size,
            default=DEFAULT_MAX_BYTES,
            help="spool size cap (default 64MiB)",
        )
        cmd.add_argument(
            "--spool-max-age",
            type=_duration(1.0),
            default=DEFAULT_MAX_AGE.total_seconds(),
            help="spool age cap (default 7d)",
        )
        cmd.add_argument(
            "--connect-timeout",
            type=_duration(0.001),
            default=5.0,
            help="TCP/TLS connect timeout (default 5s)",
        )
        cmd.add_argument(
            "--read-timeout",
            type=_duration(0.001),
            default=10.0,
            help="timeout waiting for the board's answer (default 10s)",
        )
        if name == "push-once":
            cmd.add_argument(
                "--retry-budget",
                type=_duration(MIN_INTERVAL),
                default=30.0,
                help="how long to retry before spooling (default 30s)",
            )
            cmd.add_argument(
                "--print",
                action="store_true",
                dest="print_only",
                help="print the snapshot as JSON instead of sending it",
            )
        else:
            cmd.add_argument(
                "--interval",
                type=_duration(MIN_INTERVAL),
                default=30.0,
                help="time between ticks (default 30s, at least 200ms)",
            )
            cmd.add_argument(
                "--idle-grace",
                type=_duration(),
                default=DEFAULT_GRACE_SECONDS,
                help="low-utilization time before a held GPU is idle_held (default 60s)",
            )
            cmd.add_argument(
                "--idle-grace-ticks",
                type=_positive_int,
                default=DEFAULT_GRACE_TICKS,
                help="and at least this many low ticks (default 3)",
            )
            cmd.add_argument(
                "--no-stream",
                action="store_false",
                dest="stream",
                help="do not stream utilization every second for the board's live graphs",
            )
    add_slurm_bridge_parser(sub, _duration)
    add_job_parser(sub, config_help, _duration(0.1), _cluster_name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(words)
    except SystemExit as exit_:
        # A Prolog that exits non-zero drains the node, even for a typo in its options.
        if exit_.code not in (0, None) and "job" in words:
            return EXIT_OK
        raise
    setup_logging(args.log_level)
    try:
        return _dispatch(args)
    except BrokenPipeError:
        # `gua-agent push-once --print | head`: the reader left, which is not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _dispatch(args: argparse.Namespace) -> int:
    try:
        if args.command == "enroll":
            return cmd_enroll(args)
        if args.command == "slurm-bridge":
            return cmd_slurm_bridge(args)
        if args.command == "job":
            return run_job(args)
        return cmd_push(args)
    except ConfigError as exc:
        print(f"gua-agent: {scrub(str(exc))}", file=sys.stderr)
        return EXIT_CONFIG
    except HostRevoked as exc:
        print(
            f"gua-agent: the board refused this host's agent token ({scrub(str(exc))}). The host "
            "was revoked or re-enrolled elsewhere; ask an admin for a new enrollment token and "
            "run `gua-agent enroll --force`.",
            file=sys.stderr,
        )
        return EXIT_REVOKED


def cmd_enroll(args: argparse.Namespace) -> int:
    path: Path = args.config or default_config_path()
    token = sys.stdin.readline() if args.enrollment_token == "-" else args.enrollment_token
    token = token.strip()
    redact(token)
    if not token:
        print("gua-agent: the enrollment token is empty", file=sys.stderr)
        return EXIT_USAGE
    server_url = normalize_server_url(args.server_url)
    # Checked before the claim: the token is single-use, so fail while it is still unspent.
    check_writable(path, force=args.force)
    if urlsplit(server_url).scheme == "http" and urlsplit(server_url).hostname not in (
        "localhost",
        "127.0.0.1",
        "::1",
    ):
        log.warning(
            "%s is plain HTTP: the agent token will cross the network unencrypted", server_url
        )

    timeouts = Timeouts(connect=args.connect_timeout, read=args.read_timeout)
    try:
        with BoardClient(server_url, timeouts=timeouts) as client:
            enrollment = client.claim(
                token,
                hostname=socket.gethostname(),
                agent_version=AGENT_VERSION,
                driver_version=probe_driver_version(load_nvml()),
            )
    except EnrollmentError as exc:
        print(f"gua-agent: {scrub(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    redact(enrollment.agent_token)

    config = AgentConfig(
        server_url=server_url,
        host_id=enrollment.host_id,
        display_name=args.display_name or enrollment.display_name,
        agent_token=enrollment.agent_token,
        token_prefix=enrollment.token_prefix,
        cluster=args.cluster,
    )
    try:
        save_config(path, config, force=args.force)
    except (ConfigError, OSError) as exc:
        print(
            f"gua-agent: enrolled as host {config.host_id}, but the config could not be written "
            f"({scrub(str(exc))}); the enrollment token is spent, ask for a new one",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    print(
        f"Enrolled as {config.display_name!r} (host {config.host_id}, token "
        f"{config.token_prefix}…). Config written to {path}."
    )
    return EXIT_OK


def cmd_push(args: argparse.Namespace) -> int:
    hostname = args.hostname or socket.gethostname()
    collector: FakeCollector | NvmlCollector = (
        FakeCollector(hostname) if args.fake else NvmlCollector(load_nvml())
    )
    once = args.command == "push-once"
    tracker = UsageTracker(0, 0) if once else UsageTracker(args.idle_grace_ticks, args.idle_grace)
    if once and args.print_only:
        return _print_snapshot(args, collector, hostname, tracker)

    config = load_config(args.config or default_config_path())
    redact(config.agent_token)
    spool = Spool(
        args.spool_dir or default_spool_dir(config.host_id),
        max_bytes=args.spool_max_size,
        max_age=timedelta(seconds=args.spool_max_age),
    )
    host = HostIdentity(
        hostname, AGENT_VERSION, config.host_id, config.display_name, config.cluster
    )
    timeouts = Timeouts(connect=args.connect_timeout, read=args.read_timeout)
    interval = args.retry_budget if once else args.interval
    with BoardClient(
        config.server_url, agent_token=config.agent_token, timeouts=timeouts
    ) as client:
        sender = Sender(client, spool, job_spool=JobSpool(job_spool_dir(spool.directory)))
        runner = Runner(collector, sender, host, interval=interval, tracker=tracker)
        if not once:
            log.info(
                "gua-agent %s: pushing %s to %s every %s as %r (token %s…), spool %s",
                AGENT_VERSION,
                "fake GPUs" if args.fake else "GPUs",
                config.server_url,
                format_duration(interval),
                config.display_name,
                config.token_prefix,
                spool.directory,
            )
        # The live stream runs beside the push loop on a thread of its own: it never
        # delays a tick, and its failures only ever touch the live graphs.
        streamer = (
            UtilStreamer(
                config.server_url,
                config.agent_token,
                collector.utilization,
                connect_timeout=args.connect_timeout,
            ).start()
            if not once and args.stream
            else None
        )
        try:
            with runner.signals_handled():
                runner.run(max_ticks=1 if once else None)
        finally:
            if streamer is not None:
                streamer.stop()
            collector.close()
    if not once:
        log.info("stopped after %d tick(s); %d snapshot(s) spooled", runner.ticks, len(spool))
        return EXIT_OK
    return {"sent": EXIT_OK, "spooled": EXIT_SPOOLED}.get(runner.last_outcome or "", EXIT_FAILED)


def _print_snapshot(
    args: argparse.Namespace, collector: Collector, hostname: str, tracker: UsageTracker
) -> int:
    host_id = display_name = cluster = None
    try:
        config = load_config(args.config or default_config_path())
        host_id, display_name, cluster = config.host_id, config.display_name, config.cluster
    except ConfigError:
        pass
    host = HostIdentity(hostname, AGENT_VERSION, host_id, display_name, cluster)
    try:
        payload = take_snapshot(collector, host, tracker, datetime.now(UTC), time.monotonic())
    finally:
        collector.close()
    print(json.dumps(payload, indent=2))
    return EXIT_OK
