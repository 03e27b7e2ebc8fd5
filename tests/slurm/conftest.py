"""One real Slurm cluster per test session (per xdist worker), reset between tests.

Where Slurm cannot start (not root, not installed, no daemon comes up) the tests skip
and say why; in CI (CI=true) that is a failure instead, since CI installs Slurm
(.ci/slurm-setup.sh).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.slurm.cluster import SlurmCluster, SlurmUnavailable


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"Slurm must run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    cluster = SlurmCluster()
    try:
        cluster.start()
    except SlurmUnavailable as error:
        if cluster.cgroup_tried:
            # cgroup v1 looked usable but a daemon would not start with it: without.
            cluster = SlurmCluster(cgroup=None)
            cluster.no_cgroup_reason = f"Slurm would not start with cgroup v1: {error}"
            try:
                cluster.start()
            except SlurmUnavailable as again:
                _unavailable(str(again))
        else:
            _unavailable(str(error))
    yield cluster
    cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster, with no job, no hook and every node idle after the test."""
    yield slurm_cluster
    slurm_cluster.reset()


@pytest.fixture
def start_slurm() -> Iterator[Callable[..., SlurmCluster]]:
    """Start a cluster of one's own (SlurmCluster's options), stopped after the test."""
    started: list[SlurmCluster] = []

    def start(**options: Any) -> SlurmCluster:
        cluster = SlurmCluster(**options)
        try:
            cluster.start()
        except SlurmUnavailable as error:
            _unavailable(str(error))
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.stop()
