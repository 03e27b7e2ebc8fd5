"""Every metric the board exports, defined once.

Labels are bounded and never carry tenant data: a rejection's reason is one of the
ingest's fixed reasons, a report's name is the last part of its route template.
In multiprocess mode (several uvicorn workers) prometheus-client keeps each value in
a file per process; the env variable must be set before this module is imported,
which `gua-board serve` does (board/metrics/exposition.py: multiprocess_dir).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# The reasons the ingest distinguishes (board/ingest/service.py), plus the auth failure;
# anything else is counted as "other" so a label can never grow without bound.
REJECTION_REASONS = frozenset(
    {
        "unauthorized",
        "invalid_json",
        "payload_too_large",
        "unsupported_media_type",
        "invalid_payload",
        "observed_at_in_future",
        "observed_at_too_old",
        "too_many_gpus",
        "request_timeout",
        "unavailable",
    }
)

observations_accepted = Counter(
    "gua_board_observations_accepted",
    "Agent observations stored (answered 202), duplicates included.",
)
observations_rejected = Counter(
    "gua_board_observations_rejected",
    "Agent observations refused, by reason.",
    ["reason"],
)
ingest_batch_size = Histogram(
    "gua_board_ingest_batch_size",
    "Observations stored per group-commit transaction.",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)
ingest_commit_seconds = Histogram(
    "gua_board_ingest_commit_seconds",
    "Time from taking a connection to the commit of one ingest batch.",
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
report_seconds = Histogram(
    "gua_board_report_seconds",
    "Time to answer a report request, by report name.",
    ["report"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
# The notices' channels (notice_channels.kind), incremented by board/notices/outbox.py.
NOTICE_CHANNELS = ("email", "slack", "webhook")
notices_delivered = Counter(
    "gua_board_notices_delivered", "Notices delivered (e-mail or webhook).", ["channel"]
)
notices_failed = Counter("gua_board_notices_failed", "Notice deliveries that failed.", ["channel"])
# Every series exists at 0 from the start: a rate over a series born at its first
# increment misses that increment, and "none delivered" must be a 0, not no data.
for _channel in NOTICE_CHANNELS:
    notices_delivered.labels(channel=_channel)
    notices_failed.labels(channel=_channel)
# stage: "detect" (a workspace's episodes) or "digest" (its daily digest); never a slug.
notices_pass_failures = Counter(
    "gua_board_notices_pass_failures",
    "Notice passes over one workspace that failed (retried next pass), by stage.",
    ["stage"],
)
maintenance_runs = Counter(
    "gua_board_maintenance_runs", "Maintenance runs this process made as the leader."
)
maintenance_failures = Counter(
    "gua_board_maintenance_failures", "Maintenance runs that failed (retried next interval)."
)
# "livemax" across live workers: the board is the leader if any of its workers is.
maintenance_leader = Gauge(
    "gua_board_maintenance_leader",
    "1 while this board process holds the maintenance leader lock.",
    multiprocess_mode="livemax",
)


def rejection_label(reason: str) -> str:
    return reason if reason in REJECTION_REASONS else "other"
