"""Test doubles for the agent: a fake NVML module, a fake /proc, a fake board, a contract check.

No database and no GPU: everything here runs on any Linux machine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pynvml

from tests.http_servers import QuietHTTPServer

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
MIB = 1024 * 1024


# --- fake NVML -------------------------------------------------------------------------


@dataclass
class FakeProc:
    pid: int
    used_bytes: int | None


@dataclass
class FakeGpu:
    uuid: str
    name: str | bytes = "NVIDIA H100 80GB HBM3"
    total_bytes: int = 81559 * MIB
    used_bytes: int = 1024 * MIB
    util: int = 0
    temperature: int = 35
    power_mw: int = 70500
    compute: list[FakeProc] = field(default_factory=list)
    graphics: list[FakeProc] = field(default_factory=list)
    # nvml function name -> NVML_ERROR_* code it raises for this GPU
    fail: dict[str, int] = field(default_factory=dict)
    # nvmlDeviceGetMinorNumber's answer; None: NVML_ERROR_NOT_SUPPORTED, as on a driver
    # or platform that cannot say.
    minor: int | None = None


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


class FakeNvml:
    """Stands in for the `pynvml` module, with the types and errors the real one returns."""

    NVMLError = pynvml.NVMLError
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        driver: str | bytes = "550.54.15",
        init_error: int | None = None,
        count_error: int | None = None,
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.init_error = init_error
        self.count_error = count_error
        self.initialized = False
        self.init_calls = 0
        self.shutdown_calls = 0

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._check()
        self.shutdown_calls += 1
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._check()
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        if self.count_error is not None:
            raise pynvml.NVMLError(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check()
        self._maybe_fail(self.gpus[index], "nvmlDeviceGetHandleByIndex")
        return _Handle(index)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str | bytes:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> pynvml.c_nvmlMemory_t:
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        info = pynvml.c_nvmlMemory_t()
        info.total, info.used = gpu.total_bytes, gpu.used_bytes
        info.free = max(0, gpu.total_bytes - gpu.used_bytes)
        return info

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> pynvml.c_nvmlUtilization_t:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        rates = pynvml.c_nvmlUtilization_t()
        rates.gpu, rates.memory = gpu.util, 0
        return rates

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(handle, "nvmlDeviceGetTemperature").temperature

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetMinorNumber(self, handle: _Handle) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetMinorNumber")
        if gpu.minor is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.minor

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[Any]:
        gpu = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [self._proc(p) for p in gpu.compute]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: _Handle) -> list[Any]:
        gpu = self._gpu(handle, "nvmlDeviceGetGraphicsRunningProcesses")
        return [self._proc(p) for p in gpu.graphics]

    @staticmethod
    def _proc(proc: FakeProc) -> Any:
        # What pynvml builds from c_nvmlProcessInfo_t (it maps NOT_AVAILABLE to None).
        return pynvml.nvmlFriendlyObject(
            {
                "pid": proc.pid,
                "usedGpuMemory": proc.used_bytes,
                "gpuInstanceId": 0xFFFFFFFF,
                "computeInstanceId": 0xFFFFFFFF,
            }
        )

    def _check(self) -> None:
        if not self.initialized:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: _Handle, fn: str) -> FakeGpu:
        self._check()
        gpu = self.gpus[handle.index]
        self._maybe_fail(gpu, fn)
        return gpu

    @staticmethod
    def _maybe_fail(gpu: FakeGpu, fn: str) -> None:
        if fn in gpu.fail:
            raise pynvml.NVMLError(gpu.fail[fn])


# --- fake /proc ------------------------------------------------------------------------


class FakeProcRoot:
    """A directory laid out like /proc for the entries the agent reads."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(
        self,
        pid: int,
        comm: str | None = "python",
        loginuid: str | None = None,
        cgroup: str | bytes | None = None,
    ) -> Path:
        base = self.root / str(pid)
        base.mkdir(parents=True, exist_ok=True)
        if comm is not None:
            (base / "comm").write_text(comm + "\n")
        if loginuid is not None:
            (base / "loginuid").write_text(loginuid)
        if cgroup is not None:
            data = cgroup.encode() if isinstance(cgroup, str) else cgroup
            (base / "cgroup").write_bytes(data)
        # What the agent must never read; present so a test can prove it does not.
        (base / "cmdline").write_bytes(b"python\0train.py\0--secret=hunter2\0")
        (base / "environ").write_bytes(b"AWS_SECRET_ACCESS_KEY=hunter2\0")
        return base


# --- fake board ------------------------------------------------------------------------


@dataclass
class Reply:
    status: int = 202
    body: bytes | dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: float = 0.0  # seconds to sit on the request before answering (timeouts)
    drop: bool = False  # close the connection without answering


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int | None = None  # what the board answered; None if it never did

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class FakeBoard:
    """A real HTTP server on 127.0.0.1 answering from a script, then with `default`."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.default = Reply(202, {"status": "accepted"})
        self.received: list[Received] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        board = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with board._lock:
                    index = len(board.received)
                    board.received.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    reply = board.script.popleft() if board.script else board.default
                if reply.hang:
                    board.release.wait(reply.hang)
                if reply.drop:
                    self.close_connection = True
                    return
                board.received[index].status = reply.status
                payload = reply.body
                data = json.dumps(payload).encode() if isinstance(payload, dict) else payload or b""
                self.send_response(reply.status)
                self.send_header("Content-Length", str(len(data)))
                if isinstance(payload, dict):
                    self.send_header("Content-Type", "application/json")
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        # A hung reply outlives the agent's wait: answering it then finds the client gone.
        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def answer(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def observations(self) -> list[Received]:
        return [r for r in self.received if r.path == "/agent/v1/observations"]

    def observed_at(self, status: int | None = None) -> list[str]:
        """observedAt of the snapshots received (only those answered `status`, if given)."""
        return [
            r.json["observedAt"]
            for r in self.observations()
            if status is None or r.status == status
        ]


# --- the contract's validation rules -----------------------------------------------------

_HOST_KEYS = {"hostname", "agentVersion", "driverVersion", "hostId", "displayName"}
_GPU_KEYS = {
    "index",
    "uuid",
    "name",
    "memoryTotalMb",
    "memoryUsedMb",
    "utilPct",
    "temperatureC",
    "powerW",
    "usageState",
    "processes",
}
_PROC_KEYS = {"pid", "linuxUser", "name", "type", "memoryUsedMb"}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_contract(payload: dict[str, Any], *, ours: bool = False) -> None:
    """Assert every rule of agent-api.md's observation table (strict: no unknown fields).

    `ours`: also allow the fields only our own agent sends (agent-api.md), with their
    rules: `gpus[].minorNumber`, `processes[].jobId` and `processes[].cluster`."""
    assert set(payload) == {
        "schemaVersion",
        "collectionStatus",
        "errors",
        "observedAt",
        "host",
        "gpus",
    }
    assert payload["schemaVersion"] == "availability.snapshot.v1"
    status, errors = payload["collectionStatus"], payload["errors"]
    assert status in ("ok", "partial", "error")
    assert isinstance(errors, list)
    assert all(isinstance(e, str) and e for e in errors)
    assert (not errors) if status == "ok" else bool(errors)
    observed = datetime.fromisoformat(payload["observedAt"])
    assert observed.tzinfo is not None
    assert payload["observedAt"].endswith("+00:00")
    host = payload["host"]
    assert set(host) <= _HOST_KEYS
    for key in ("hostname", "agentVersion", "driverVersion"):
        assert isinstance(host[key], str)
    assert len(host["agentVersion"]) <= 64
    assert len(host["hostname"]) <= 255
    assert isinstance(payload["gpus"], list)
    for gpu in payload["gpus"]:
        assert set(gpu) <= (_GPU_KEYS | {"minorNumber"} if ours else _GPU_KEYS)
        if "minorNumber" in gpu:
            assert _is_int(gpu["minorNumber"])
            assert 0 <= gpu["minorNumber"] <= 1023
        assert set(gpu) >= _GPU_KEYS - {"usageState"}
        assert _is_int(gpu["index"])
        assert gpu["index"] >= 0
        assert isinstance(gpu["uuid"], str)
        assert gpu["uuid"]
        assert isinstance(gpu["name"], str)
        assert gpu["name"]
        assert _is_int(gpu["memoryTotalMb"])
        assert gpu["memoryTotalMb"] > 0
        assert _is_int(gpu["memoryUsedMb"])
        assert 0 <= gpu["memoryUsedMb"] <= gpu["memoryTotalMb"]
        assert _is_int(gpu["utilPct"])
        assert 0 <= gpu["utilPct"] <= 100
        for key in ("temperatureC", "powerW"):
            assert gpu[key] is None or (_is_int(gpu[key]) and gpu[key] >= 0)
        assert gpu.get("usageState", "idle") in ("active", "idle_held", "idle")
        for proc in gpu["processes"]:
            assert set(proc) <= (_PROC_KEYS | {"jobId", "cluster"} if ours else _PROC_KEYS)
            if "jobId" in proc:
                assert isinstance(proc["jobId"], str)
                assert 0 < len(proc["jobId"]) <= 64
            if "cluster" in proc:
                assert "jobId" in proc
                assert isinstance(proc["cluster"], str)
                assert 0 < len(proc["cluster"]) <= 64
            assert set(proc) >= _PROC_KEYS - {"type"}
            assert _is_int(proc["pid"])
            assert proc["pid"] > 0
            assert isinstance(proc["linuxUser"], str)
            assert proc["linuxUser"]
            assert isinstance(proc["name"], str)
            assert proc["name"]
            assert proc.get("type", "compute") in ("compute", "graphics")
            mem = proc["memoryUsedMb"]
            assert mem is None or (_is_int(mem) and mem >= 0)


@contextlib.contextmanager
def logging_left_as_found() -> Iterator[None]:
    """The agent's CLI sets up logging for its process (a root handler on the stderr of
    the moment, httpx quieted); run in-process in a test, that must not outlive it, or
    later tests in the same worker log to a closed stream and see no httpx lines."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quieted = {name: logging.getLogger(name).level for name in ("httpx", "httpcore")}
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        for name, was in quieted.items():
            logging.getLogger(name).setLevel(was)


# The agent token write_config puts in a config: its secret part must never reach a log.
CONFIG_SECRET = "r13-s3cr3t-part-never-in-a-log-0123456789"
CONFIG_TOKEN = f"gua_agent_hunt1300_{CONFIG_SECRET}"


class ScriptedBoard:
    """A TCP server on 127.0.0.1; `handler(conn)` runs per connection after the request."""

    def __init__(self, handler: Callable[[socket.socket], None]) -> None:
        self.handler = handler
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                self.handler(conn)
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def accepted(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")


def write_config(path: Path, **changed: str) -> Path:
    data = {
        "serverUrl": "http://127.0.0.1:9",
        "hostId": "5b0e7c3e-1f0a-4c55-9d6b-2a8f3b1c9e40",
        "displayName": "node-13",
        "agentToken": CONFIG_TOKEN,
        "tokenPrefix": "gua_agent_hunt1300",
    }
    path.write_text(json.dumps({**data, **changed}))
    os.chmod(path, 0o600)
    return path
