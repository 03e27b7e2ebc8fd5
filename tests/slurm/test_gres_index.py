"""What a GRES IDX is: the GPU's place in slurmd's list, not its device minor number.

Each job below gets one GPU and tries to open every device file of the node: the device
cgroup (ConstrainDevices) lets it open its own GPU only (ENXIO: no driver behind our
files) and refuses the others (EPERM). So the test sees which /dev/nvidiaN each IDX is.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.slurm.cluster import SlurmCluster


def minor_of_each_idx(cluster: SlurmCluster) -> dict[int, int]:
    """IDX -> minor number of the one device file a job holding that IDX can open."""
    if not cluster.devices_are_char or not cluster.cgroup:
        pytest.skip("device limits cannot be observed here (no mknod or no cgroup v1)")
    node = cluster.nodes[0]
    assert cluster.layout is not None
    files = " ".join(str(cluster.layout.device(node, m)) for m in sorted(node.gpu_minors))
    script = (
        f"for f in {files}; do cat $f 2>&1 | grep -q 'not permitted' || echo open=$f; done; "
        'echo "gpus=$SLURM_JOB_GPUS"; sleep 300'
    )
    found: dict[int, int] = {}
    for _ in node.gpu_minors:
        job_id = cluster.sbatch("--gres=gpu:1", wrap=script)
        job = cluster.wait_job(job_id, "RUNNING")
        text = cluster.output(job_id, "gpus=")
        [opened] = [w.removeprefix("open=") for w in text.split() if w.startswith("open=")]
        idx = int(job["gres_detail"][0].split("IDX:")[1].rstrip(")"))
        assert text.split()[-1] == f"gpus={idx}"  # SLURM_JOB_GPUS is the IDX too
        found[idx] = int(opened.rsplit("nvidia", 1)[1])
    return found


def test_idx_follows_the_order_gres_conf_lists_the_files(
    start_slurm: Callable[..., SlurmCluster],
) -> None:
    cluster = start_slurm(node_names=("listed1",), gpu_minors=(6, 2, 5, 7))
    assert minor_of_each_idx(cluster) == {0: 6, 1: 2, 2: 5, 3: 7}


def test_with_autodetect_idx_follows_nvml_enumeration(
    start_slurm: Callable[..., SlurmCluster],
) -> None:
    """AutoDetect=nvml (emulated by Slurm's fake_gpus.conf): IDX is NVML's index (PCI bus
    order), which is the minor number only where the driver numbered them the same way."""
    cluster = start_slurm(node_names=("detect1",), pci_order=(2, 0, 3, 1))
    assert minor_of_each_idx(cluster) == {0: 2, 1: 0, 2: 3, 3: 1}
