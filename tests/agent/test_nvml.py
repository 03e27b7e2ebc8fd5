"""Collection from NVML, against a fake module with the shapes pynvml really returns."""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime

import pynvml
import pytest

from agent.model import Collection
from agent.nvml import NvmlCollector
from agent.payload import HostIdentity, build_observation
from agent.procinfo import ProcInfo
from agent.usage import UsageTracker
from tests.agent.fakes import MIB, FakeGpu, FakeNvml, FakeProc, FakeProcRoot

USERS = {1000: "alice", 1001: "bob", 0: "root"}
AT = datetime(2026, 12, 2, 17, 42, 36, 516146, tzinfo=UTC)


def collector(nvml: FakeNvml | None, proc_root: FakeProcRoot) -> NvmlCollector:
    return NvmlCollector(nvml, ProcInfo(proc_root.root, USERS.get))


def payload(collection: Collection) -> dict[str, object]:
    states = UsageTracker(0, 0).apply(collection, 0.0)
    return build_observation(states, HostIdentity("gpu01", "0.1.0", "h1", "GPU 01"), AT)


def two_gpus() -> list[FakeGpu]:
    return [
        FakeGpu(
            "GPU-aaaa",
            util=87,
            used_bytes=40000 * MIB,
            power_mw=301_499,
            compute=[FakeProc(4242, 39000 * MIB + 123)],
        ),
        FakeGpu("GPU-bbbb", util=0, used_bytes=0, compute=[], graphics=[]),
    ]


def test_normal_collection(proc_root: FakeProcRoot, contract) -> None:
    proc_root.add(4242, comm="python3", loginuid="1000")
    nvml = FakeNvml(two_gpus())

    result = collector(nvml, proc_root).collect()
    body = payload(result)

    contract(body)
    assert result.status == "ok"
    assert body["collectionStatus"] == "ok"
    assert body["errors"] == []
    assert body["host"] == {
        "hostname": "gpu01",
        "agentVersion": "0.1.0",
        "driverVersion": "550.54.15",
        "hostId": "h1",
        "displayName": "GPU 01",
    }
    first, second = body["gpus"]
    assert first == {
        "index": 0,
        "uuid": "GPU-aaaa",
        "name": "NVIDIA H100 80GB HBM3",
        "memoryTotalMb": 81559,
        "utilPct": 87,
        "memoryUsedMb": 40000,
        "temperatureC": 35,
        "powerW": 301,  # mW floored to W
        "processes": [
            {
                "pid": 4242,
                "linuxUser": "alice",
                "name": "python3",
                "type": "compute",
                "memoryUsedMb": 39000,
            }
        ],
        "usageState": "active",
    }
    assert second["processes"] == []
    assert second["usageState"] == "idle"
    assert nvml.init_calls == 1


def test_nvml_initialised_once_and_shut_down(proc_root: FakeProcRoot) -> None:
    nvml = FakeNvml(two_gpus())
    c = collector(nvml, proc_root)
    c.collect()
    c.collect()
    c.close()
    c.close()
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)


def test_bytes_from_old_pynvml_are_decoded(proc_root: FakeProcRoot) -> None:
    gpus = [FakeGpu("GPU-x", name=b"Tesla V100-SXM2-16GB")]
    nvml = FakeNvml(gpus, driver=b"470.82.01")
    result = collector(nvml, proc_root).collect()
    assert result.driver_version == "470.82.01"
    assert result.gpus[0].name == "Tesla V100-SXM2-16GB"


@pytest.mark.parametrize(
    ("function", "field"),
    [
        ("nvmlDeviceGetTemperature", "temperatureC"),
        ("nvmlDeviceGetPowerUsage", "powerW"),
    ],
)
def test_optional_metric_failing_blanks_only_that_metric(
    proc_root: FakeProcRoot, contract, function: str, field: str
) -> None:
    gpus = two_gpus()
    gpus[0].fail[function] = pynvml.NVML_ERROR_NOT_SUPPORTED
    body = payload(collector(FakeNvml(gpus), proc_root).collect())
    contract(body)
    assert body["collectionStatus"] == "ok"
    gpu = body["gpus"][0]
    assert gpu[field] is None
    other = "powerW" if field == "temperatureC" else "temperatureC"
    assert gpu[other] is not None
    assert gpu["utilPct"] == 87
    assert body["gpus"][1][field] is not None


def test_name_failing_reports_unknown(proc_root: FakeProcRoot, contract) -> None:
    gpus = two_gpus()
    gpus[1].fail["nvmlDeviceGetName"] = pynvml.NVML_ERROR_UNKNOWN
    body = payload(collector(FakeNvml(gpus), proc_root).collect())
    contract(body)
    assert body["gpus"][1]["name"] == "unknown"
    assert body["collectionStatus"] == "ok"


def test_utilization_failing_is_partial_with_zero_and_no_idle_held(
    proc_root: FakeProcRoot, contract
) -> None:
    gpus = two_gpus()
    gpus[0].fail["nvmlDeviceGetUtilizationRates"] = pynvml.NVML_ERROR_GPU_IS_LOST
    body = payload(collector(FakeNvml(gpus), proc_root).collect())
    contract(body)
    assert body["collectionStatus"] == "partial"
    assert body["errors"] == ["utilization_unavailable"]
    gpu = body["gpus"][0]
    assert gpu["utilPct"] == 0
    # Held by a compute process, but with no reading nobody is called idle-held.
    assert gpu["usageState"] == "active"
    assert [p["pid"] for p in gpu["processes"]] == [4242]


def test_memory_failing_leaves_that_gpu_out(proc_root: FakeProcRoot, contract) -> None:
    gpus = two_gpus()
    gpus[1].fail["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_UNKNOWN
    body = payload(collector(FakeNvml(gpus), proc_root).collect())
    contract(body)
    assert body["collectionStatus"] == "partial"
    assert body["errors"] == ["memory_info_unavailable"]
    assert [g["uuid"] for g in body["gpus"]] == ["GPU-aaaa"]


def test_lost_gpu_left_out_and_all_lost_is_error(proc_root: FakeProcRoot, contract) -> None:
    gpus = two_gpus()
    gpus[0].fail["nvmlDeviceGetHandleByIndex"] = pynvml.NVML_ERROR_GPU_IS_LOST
    body = payload(collector(FakeNvml(gpus), proc_root).collect())
    contract(body)
    assert body["collectionStatus"] == "partial"
    assert body["errors"] == ["gpu_unavailable"]
    assert [g["index"] for g in body["gpus"]] == [1]

    gpus[1].fail["nvmlDeviceGetUUID"] = pynvml.NVML_ERROR_GPU_IS_LOST
    body = payload(collector(FakeNvml(gpus), proc_root).collect())
    contract(body)
    assert body["collectionStatus"] == "error"
    assert body["gpus"] == []
    assert body["errors"] == ["gpu_unavailable"]


@pytest.mark.parametrize(
    "function", ["nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"]
)
def test_process_list_failing_is_partial(proc_root: FakeProcRoot, contract, function: str) -> None:
    proc_root.add(4242, loginuid="1000")
    gpus = two_gpus()
    gpus[0].fail[function] = pynvml.NVML_ERROR_NO_PERMISSION
    result = collector(FakeNvml(gpus), proc_root).collect()
    body = payload(result)
    contract(body)
    assert body["collectionStatus"] == "partial"
    assert body["errors"] == ["process_list_unavailable"]
    broken, fine = body["gpus"]
    assert broken["processes"] == []
    assert "usageState" not in broken
    assert broken["utilPct"] == 87  # the card's own metrics still go out
    assert fine["usageState"] == "idle"


def test_errors_are_deduplicated(proc_root: FakeProcRoot, contract) -> None:
    gpus = two_gpus()
    for gpu in gpus:
        gpu.fail["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    body = payload(collector(FakeNvml(gpus), proc_root).collect())
    contract(body)
    assert body["errors"] == ["process_list_unavailable"]


@pytest.mark.parametrize(
    "code",
    [
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        pynvml.NVML_ERROR_NO_PERMISSION,
    ],
)
def test_init_failure_is_error_heartbeat(
    proc_root: FakeProcRoot, contract, example, code: int
) -> None:
    nvml = FakeNvml(two_gpus(), init_error=code)
    body = payload(collector(nvml, proc_root).collect())
    contract(body)
    released = example("observation-1.3.0-error-heartbeat.json")
    assert list(body) == list(released)
    assert {k: v for k, v in body.items() if k not in ("observedAt", "host")} == {
        "schemaVersion": "availability.snapshot.v1",
        "collectionStatus": "error",
        "gpus": [],
        "errors": ["nvml_init_failed"],
    }
    assert body["host"]["driverVersion"] == "unknown"


def test_init_failure_recovers_when_driver_appears(proc_root: FakeProcRoot) -> None:
    nvml = FakeNvml(two_gpus(), init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    c = collector(nvml, proc_root)
    assert c.collect().status == "error"
    nvml.init_error = None
    result = c.collect()
    assert result.status == "ok"
    assert result.driver_version == "550.54.15"


def test_pynvml_missing_is_error_heartbeat(proc_root: FakeProcRoot) -> None:
    result = collector(None, proc_root).collect()
    assert (result.status, result.errors, result.gpus) == ("error", ("nvml_init_failed",), ())


def test_device_count_failure_is_error_and_reinitialises(proc_root: FakeProcRoot) -> None:
    nvml = FakeNvml(two_gpus(), count_error=pynvml.NVML_ERROR_UNKNOWN)
    c = collector(nvml, proc_root)
    result = c.collect()
    assert (result.status, result.errors) == ("error", ("gpu_enumeration_failed",))
    nvml.count_error = None
    assert c.collect().status == "ok"
    assert nvml.init_calls == 2


def test_real_pynvml_without_a_driver_never_raises() -> None:
    """On this machine the real module either reads GPUs or gives an error heartbeat."""
    c = NvmlCollector(pynvml)
    try:
        result = c.collect()
    finally:
        c.close()
    assert result.status in ("ok", "partial", "error")
    if result.status == "error":
        assert result.gpus == ()


@pytest.mark.parametrize("used", [None, 2**64 - 1])
def test_unknown_process_memory_is_null(proc_root: FakeProcRoot, contract, used) -> None:
    proc_root.add(77, loginuid="1001")
    gpus = [FakeGpu("GPU-c", util=50, compute=[FakeProc(77, used)])]
    body = payload(collector(FakeNvml(gpus), proc_root).collect())
    contract(body)
    assert body["gpus"][0]["processes"][0]["memoryUsedMb"] is None


def test_graphics_process_and_duplicate_pid(proc_root: FakeProcRoot, contract) -> None:
    proc_root.add(1200, comm="Xorg", loginuid="4294967295")
    proc_root.add(300, comm="blender", loginuid="1001")
    os.chown(proc_root.root / "1200", 0, 0)
    gpus = [
        FakeGpu(
            "GPU-d",
            util=1,
            compute=[FakeProc(300, 512 * MIB)],
            # blender uses the card both ways: one entry, as compute
            graphics=[FakeProc(1200, 128 * MIB), FakeProc(300, 512 * MIB)],
        ),
        FakeGpu("GPU-e", util=0, graphics=[FakeProc(1200, 64 * MIB)]),
    ]
    body = payload(collector(FakeNvml(gpus), proc_root).collect())
    contract(body)
    procs = body["gpus"][0]["processes"]
    assert procs == [
        {"pid": 300, "linuxUser": "bob", "name": "blender", "type": "compute", "memoryUsedMb": 512},
        {"pid": 1200, "linuxUser": "root", "name": "Xorg", "type": "graphics", "memoryUsedMb": 128},
    ]
    assert body["gpus"][0]["usageState"] == "idle_held"
    # A card with only graphics processes has no holder: idle.
    assert body["gpus"][1]["usageState"] == "idle"


def test_process_gone_between_nvml_and_proc(proc_root: FakeProcRoot, contract) -> None:
    gpus = [FakeGpu("GPU-f", util=30, compute=[FakeProc(9999, 200 * MIB)])]
    body = payload(collector(FakeNvml(gpus), proc_root).collect())
    contract(body)
    assert body["gpus"][0]["processes"][0] | {"pid": 0} == {
        "pid": 0,
        "linuxUser": "unknown",
        "name": "unknown",
        "type": "compute",
        "memoryUsedMb": 200,
    }


def test_persistent_failure_warns_once(proc_root: FakeProcRoot, caplog) -> None:
    gpus = two_gpus()
    gpus[0].fail["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVML_ERROR_NO_PERMISSION
    c = collector(FakeNvml(gpus), proc_root)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            c.collect()
    assert len([r for r in caplog.records if "process list" in r.getMessage()]) == 1


def test_used_memory_above_total_is_clamped(proc_root: FakeProcRoot, contract) -> None:
    gpus = [FakeGpu("GPU-g", total_bytes=1000 * MIB, used_bytes=1200 * MIB)]
    body = payload(collector(FakeNvml(gpus), proc_root).collect())
    contract(body)
    assert body["gpus"][0]["memoryUsedMb"] == 1000


class _OpenRecorder:
    """Records paths opened while active (an audit hook cannot be removed, so it idles)."""

    installed: _OpenRecorder | None = None

    def __init__(self) -> None:
        self.active = False
        self.paths: list[str] = []

    def __call__(self, event: str, args: tuple[object, ...]) -> None:
        if self.active and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            self.paths.append(os.fsdecode(args[0]))

    @classmethod
    def get(cls) -> _OpenRecorder:
        if cls.installed is None:
            cls.installed = cls()
            sys.addaudithook(cls.installed)
        return cls.installed


def test_never_reads_command_lines_or_environment(proc_root: FakeProcRoot) -> None:
    proc_root.add(4242, loginuid="1000")
    recorder = _OpenRecorder.get()
    recorder.paths.clear()
    recorder.active = True
    try:
        collector(FakeNvml(two_gpus()), proc_root).collect()
    finally:
        recorder.active = False
    read = {os.path.basename(p) for p in recorder.paths if p.startswith(str(proc_root.root))}
    assert read == {"comm", "loginuid", "cgroup"}


# --- fields only our agent sends: minor numbers, process job ids -------------------------

SLURM_V1 = "6:freezer:/slurm_node2/uid_0/job_198005/step_batch\n"
SLURM_V1 += "5:devices:/slurm_node2/uid_0/job_198005/step_batch/task_0\n"


def ours(collection: Collection, cluster: str | None = None) -> dict[str, object]:
    states = UsageTracker(0, 0).apply(collection, 0.0)
    host = HostIdentity("gpu01", "0.1.0", "h1", "GPU 01", cluster)
    return build_observation(states, host, AT)


def test_minor_numbers_are_reported(proc_root: FakeProcRoot, contract) -> None:
    gpus = two_gpus()
    gpus[0].minor, gpus[1].minor = 6, 2  # the driver's numbering need not follow the index
    body = ours(collector(FakeNvml(gpus), proc_root).collect())
    contract(body, ours=True)
    assert [(g["index"], g["minorNumber"]) for g in body["gpus"]] == [(0, 6), (1, 2)]
    # After usageState: the released agent's keys keep their order, ours come last.
    assert list(body["gpus"][0])[-1] == "minorNumber"


@pytest.mark.parametrize(
    "code",
    [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN],
)
def test_minor_number_failing_leaves_only_it_out(
    proc_root: FakeProcRoot, contract, code: int
) -> None:
    gpus = two_gpus()
    gpus[0].minor, gpus[1].minor = 0, 1
    gpus[0].fail["nvmlDeviceGetMinorNumber"] = code
    result = collector(FakeNvml(gpus), proc_root).collect()
    body = ours(result)
    contract(body, ours=True)
    # Optional: no error code, the snapshot stays ok, the card is otherwise complete.
    assert (result.status, result.errors) == ("ok", ())
    first, second = body["gpus"]
    assert "minorNumber" not in first
    assert first["utilPct"] == 87
    assert second["minorNumber"] == 1


def test_minor_number_unsupported_everywhere_is_the_released_shape(
    proc_root: FakeProcRoot, contract
) -> None:
    """A driver that never answers (FakeGpu.minor None) gives exactly what the released
    agent sends: the board's validation of it needs no new field."""
    body = ours(collector(FakeNvml(two_gpus()), proc_root).collect())
    contract(body)
    assert all("minorNumber" not in g for g in body["gpus"])


class _NvmlWithoutMinorNumbers(FakeNvml):
    """A pynvml too old (or a platform) without nvmlDeviceGetMinorNumber."""

    def __getattribute__(self, name: str) -> object:
        if name == "nvmlDeviceGetMinorNumber":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_nvml_without_the_minor_number_function(proc_root: FakeProcRoot, contract) -> None:
    gpus = two_gpus()
    gpus[0].minor = 3
    result = collector(_NvmlWithoutMinorNumbers(gpus), proc_root).collect()
    assert result.status == "ok"
    assert [g.minor_number for g in result.gpus] == [None, None]
    contract(ours(result))


@pytest.mark.parametrize("value", [-1, 1024, 2**32 - 1, True, "3", 2.0])
def test_odd_minor_numbers_are_left_out(proc_root: FakeProcRoot, contract, value) -> None:
    gpus = two_gpus()
    gpus[0].minor = value
    body = ours(collector(FakeNvml(gpus), proc_root).collect())
    contract(body, ours=True)
    assert "minorNumber" not in body["gpus"][0]


def test_process_job_id_and_cluster(proc_root: FakeProcRoot, contract) -> None:
    proc_root.add(4242, loginuid="1000", cgroup=SLURM_V1)
    proc_root.add(5151, loginuid="1001", cgroup="0::/user.slice/user-1001.slice/session-4.scope\n")
    gpus = two_gpus()
    gpus[1].compute = [FakeProc(5151, 10 * MIB)]
    result = collector(FakeNvml(gpus), proc_root).collect()
    assert [p.job_id for g in result.gpus for p in g.processes] == ["198005", None]

    body = ours(result, cluster="testlab")
    contract(body, ours=True)
    in_job, outside = (g["processes"][0] for g in body["gpus"])
    assert (in_job["jobId"], in_job["cluster"]) == ("198005", "testlab")
    assert list(in_job)[-2:] == ["jobId", "cluster"]
    # Not in a job: the released agent's shape, nothing null.
    assert "jobId" not in outside
    assert "cluster" not in outside

    # No cluster in the config: the job id alone.
    body = ours(result)
    contract(body, ours=True)
    proc = body["gpus"][0]["processes"][0]
    assert proc["jobId"] == "198005"
    assert "cluster" not in proc
