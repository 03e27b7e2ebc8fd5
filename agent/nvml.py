"""Collection from NVML (nvidia-ml-py's `pynvml`), one pass per tick.

The NVML module is a constructor parameter, so tests hand in a fake with the shapes
pynvml really returns and nothing here needs a GPU.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from types import ModuleType
from typing import Any, TypeVar

from agent.model import (
    ERROR_GPU_ENUMERATION_FAILED,
    ERROR_GPU_UNAVAILABLE,
    ERROR_MEMORY_INFO_UNAVAILABLE,
    ERROR_NVML_INIT_FAILED,
    ERROR_PROCESS_LIST_UNAVAILABLE,
    ERROR_UTILIZATION_UNAVAILABLE,
    UNKNOWN,
    Collection,
    CollectionStatus,
    GpuReading,
    ProcessReading,
    ProcessType,
    UtilReading,
)
from agent.procinfo import ProcInfo

log = logging.getLogger(__name__)

MIB = 1024 * 1024
# NVML_VALUE_NOT_AVAILABLE for unsigned long long; recent pynvml already maps it to None.
_NOT_AVAILABLE_ULL = 2**64 - 1

# The largest minor number a GPU reports (the board takes 0-1023, like `index`).
MAX_MINOR = 1023

T = TypeVar("T")

_PROCESS_GETTERS: tuple[tuple[ProcessType, str], ...] = (
    ("compute", "nvmlDeviceGetComputeRunningProcesses"),
    ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
)


def load_nvml() -> ModuleType | None:
    """Import pynvml, or None when it is not installed (reported as `nvml_init_failed`)."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def probe_driver_version(nvml: Any | None) -> str | None:
    """The driver version for the enrollment claim, or None (quietly) when NVML cannot say."""
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        return _text(nvml.nvmlSystemGetDriverVersion()) or None
    except nvml.NVMLError:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _text(value: object) -> str:
    # Older pynvml releases return bytes for names, UUIDs and versions.
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


class NvmlCollector:
    """Reads every GPU and its processes through an NVML module.

    NVML is initialised on first use and again after a failure, so an agent started
    before the driver was loaded recovers without a restart.
    """

    def __init__(self, nvml: Any | None, proc_info: ProcInfo | None = None) -> None:
        self._nvml = nvml
        self._proc = proc_info or ProcInfo()
        self._initialized = False
        self._driver_version = UNKNOWN
        self._warned: set[str] = set()
        # The live stream reads from its own thread; NVML's init and shutdown are not
        # to interleave with it.
        self._lock = threading.Lock()

    def collect(self, observed_at: datetime | None = None) -> Collection:
        """Read all GPUs once (NVML reports the present; `observed_at` is for interface parity)."""
        with self._lock:
            return self._collect()

    def utilization(self) -> list[UtilReading]:
        """Each GPU's utilization and used memory, for the live stream: a cheap read, no
        processes; a GPU that cannot be read is left out, and nothing when NVML is down."""
        with self._lock:
            nvml = self._nvml
            if nvml is None or not self._initialized:
                return []
            found: list[UtilReading] = []
            try:
                for index in range(int(nvml.nvmlDeviceGetCount())):
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    util = nvml.nvmlDeviceGetUtilizationRates(handle)
                    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                    found.append(
                        UtilReading(
                            _text(nvml.nvmlDeviceGetUUID(handle)),
                            int(util.gpu),
                            int(memory.used) // MIB,
                        )
                    )
            except (nvml.NVMLError, AttributeError) as exc:
                log.debug("live stream: NVML read failed: %s", exc)
            return found

    def _collect(self) -> Collection:
        nvml = self._nvml
        if nvml is None:
            self._warn_once("import", "pynvml (nvidia-ml-py) is not importable")
            return Collection.failed(ERROR_NVML_INIT_FAILED)
        if not self._initialized and not self._init(nvml):
            return Collection.failed(ERROR_NVML_INIT_FAILED)
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            log.warning("NVML could not count GPUs (%s); will re-initialise next tick", exc)
            self._shutdown()
            return Collection.failed(ERROR_GPU_ENUMERATION_FAILED)

        errors: list[str] = []
        gpus = [g for i in range(count) if (g := self._read_gpu(nvml, i, errors)) is not None]
        status: CollectionStatus = "ok"
        if errors:
            status = "partial" if gpus else "error"
        return Collection(
            driver_version=self._driver_version,
            gpus=tuple(gpus),
            status=status,
            errors=tuple(dict.fromkeys(errors)),
        )

    def close(self) -> None:
        """Shut NVML down (safe to call more than once)."""
        with self._lock:
            self._shutdown()

    def _shutdown(self) -> None:
        if self._initialized and self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                log.debug("nvmlShutdown failed: %s", exc)
        self._initialized = False

    def _init(self, nvml: Any) -> bool:
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self._warn_once("init", f"NVML initialisation failed: {exc}")
            return False
        self._initialized = True
        self._warned.discard("init")
        try:
            self._driver_version = _text(nvml.nvmlSystemGetDriverVersion()) or UNKNOWN
        except nvml.NVMLError:
            self._driver_version = UNKNOWN
        return True

    def _read_gpu(self, nvml: Any, index: int, errors: list[str]) -> GpuReading | None:
        def call(fn: Callable[..., T], *args: object) -> T | None:
            try:
                return fn(*args)
            except (nvml.NVMLError, AttributeError) as exc:
                log.debug("NVML call %s on GPU %d failed: %s", fn, index, exc)
                return None

        handle = call(nvml.nvmlDeviceGetHandleByIndex, index)
        uuid = _text(call(nvml.nvmlDeviceGetUUID, handle) or "") if handle is not None else ""
        if not uuid:
            self._warn_once(f"gpu{index}", f"GPU {index} could not be read; left out")
            errors.append(ERROR_GPU_UNAVAILABLE)
            return None

        memory = call(nvml.nvmlDeviceGetMemoryInfo, handle)
        total_mb = int(memory.total) // MIB if memory is not None else 0
        if memory is None or total_mb <= 0:
            # memoryTotalMb must be > 0; without it the card cannot be reported at all.
            self._warn_once(f"mem{uuid}", f"GPU {uuid}: memory info unavailable; left out")
            errors.append(ERROR_MEMORY_INFO_UNAVAILABLE)
            return None

        util = call(nvml.nvmlDeviceGetUtilizationRates, handle)
        if util is None:
            self._warn_once(f"util{uuid}", f"GPU {uuid}: utilization unavailable; sent as 0")
            errors.append(ERROR_UTILIZATION_UNAVAILABLE)

        temperature = call(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        power_mw = call(nvml.nvmlDeviceGetPowerUsage, handle)
        processes = self._read_processes(nvml, handle, uuid)
        if processes is None:
            errors.append(ERROR_PROCESS_LIST_UNAVAILABLE)
        # Optional (our agent only): a GPU whose minor number cannot be read is reported
        # without one, and the board matches Slurm's GPUs to it by index.
        get_minor = getattr(nvml, "nvmlDeviceGetMinorNumber", None)
        minor = call(get_minor, handle) if get_minor is not None else None

        return GpuReading(
            index=index,
            uuid=uuid,
            name=_text(call(nvml.nvmlDeviceGetName, handle) or "").strip() or UNKNOWN,
            memory_total_mb=total_mb,
            memory_used_mb=int(memory.used) // MIB,
            util_pct=int(util.gpu) if util is not None else 0,
            temperature_c=int(temperature) if temperature is not None else None,
            power_w=int(power_mw) // 1000 if power_mw is not None else None,
            processes=processes or (),
            processes_ok=processes is not None,
            util_ok=util is not None,
            minor_number=_minor_number(minor),
        )

    def _read_processes(
        self, nvml: Any, handle: object, uuid: str
    ) -> tuple[ProcessReading, ...] | None:
        lists: list[tuple[ProcessType, Iterable[Any]]] = []
        for kind, getter in _PROCESS_GETTERS:
            try:
                lists.append((kind, list(getattr(nvml, getter)(handle))))
            except (nvml.NVMLError, AttributeError) as exc:
                self._warn_once(
                    f"{kind}{uuid}", f"GPU {uuid}: {kind} process list unavailable: {exc}"
                )
                return None
        seen: dict[int, ProcessReading] = {}
        for kind, entries in lists:
            for entry in entries:
                pid = int(entry.pid)
                # A process using the card both ways is listed twice; compute wins (it bills).
                if pid <= 0 or pid in seen:
                    continue
                seen[pid] = ProcessReading(
                    pid=pid,
                    linux_user=self._proc.user(pid),
                    name=self._proc.name(pid),
                    type=kind,
                    memory_used_mb=_process_memory_mb(getattr(entry, "usedGpuMemory", None)),
                    job_id=self._proc.job_id(pid),
                )
        return tuple(seen.values())

    def _warn_once(self, key: str, message: str) -> None:
        # Problems that persist would otherwise log every tick.
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)


def _minor_number(value: object) -> int | None:
    # /dev/nvidiaN; a value the board would refuse is left out rather than sent.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_MINOR:
        return None
    return value


def _process_memory_mb(used: object) -> int | None:
    if used is None or not isinstance(used, int) or used < 0 or used >= _NOT_AVAILABLE_ULL:
        return None
    return used // MIB
