"""`/metrics` text: this process's registry, or every worker's under a per-run directory.

With one worker the default registry is all there is. With several, `gua-board serve`
makes a fresh directory for prometheus-client's per-process files before the workers
start (the env variable is inherited), each worker marks itself dead when it stops,
and the directory is removed when the server exits, so a restart never adds up the
counts of an earlier run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# The variable prometheus-client reads (named PROMETHEUS_MULTIPROC_DIR, not …PROCESS…).
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def multiprocess_enabled() -> bool:
    return bool(os.environ.get(MULTIPROCESS_ENV))


@contextmanager
def multiprocess_dir(workers: int) -> Iterator[str | None]:
    """For `serve`: a per-run directory when there are several workers, else nothing."""
    if workers <= 1:
        # One process: the default registry (a directory left in the environment by
        # the operator would otherwise add up earlier runs' counts).
        os.environ.pop(MULTIPROCESS_ENV, None)
        os.environ.pop(MULTIPROCESS_ENV.lower(), None)
        yield None
        return
    path = tempfile.mkdtemp(prefix="gua-board-metrics-")
    os.environ[MULTIPROCESS_ENV] = path
    try:
        yield path
    finally:
        os.environ.pop(MULTIPROCESS_ENV, None)
        shutil.rmtree(path, ignore_errors=True)


def mark_process_dead(pid: int | None = None) -> None:
    """A worker stops: its live gauges no longer count (no-op with one process)."""
    if multiprocess_enabled():
        dead = os.getpid() if pid is None else pid
        multiprocess.mark_process_dead(dead)  # type: ignore[no-untyped-call]


class _Families(Collector):
    """Metric families computed just before the scrape (e.g. from the database)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def render(computed: Iterable[Metric] = ()) -> bytes:
    """The exposition text: the process's (or every worker's) metrics, then `computed`."""
    if multiprocess_enabled():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        text = generate_latest(registry)
    else:
        text = generate_latest(REGISTRY)
    extra = CollectorRegistry(auto_describe=False)
    extra.register(_Families(computed))
    return text + generate_latest(extra)
