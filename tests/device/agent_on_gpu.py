"""Our agent against a real NVIDIA GPU: what it reports idle, idle-held and busy.

Run on a machine with a GPU, the repository's root as the working directory, and
PyTorch installed (it makes the holding and the busy process):

    python3 tests/device/agent_on_gpu.py OUT_DIR

A loopback receiver stands in for the board (any 2xx is "accepted" to the agent); each
phase runs `python3 -m agent push-once` with a config pointing at it and keeps the body
the agent sent as OUT_DIR/<phase>.json. `tests/device/check_bodies.py` then validates
them with the board's own schema, where the board is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOLD = """
import sys, time, torch
x = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")  # 2 GiB, then nothing
torch.cuda.synchronize()
open(sys.argv[1], "w").write("ready")
time.sleep(120)
"""
BUSY = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
open(sys.argv[1], "w").write("ready")
end = time.time() + 120
while time.time() < end:
    a @ a
    torch.cuda.synchronize()
"""


class Receiver(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length", "0"))
        Receiver.bodies.append(self.rfile.read(length))
        answer = b'{"accepted": 1}'
        self.send_response(202)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def push_once(config: Path, spool: Path, out: Path, phase: str) -> None:
    before = len(Receiver.bodies)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent",
            "push-once",
            "--config",
            str(config),
            "--spool-dir",
            str(spool),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    (out / f"{phase}.log").write_text(done.stdout + done.stderr + f"\nexit {done.returncode}\n")
    if len(Receiver.bodies) > before:
        (out / f"{phase}.json").write_bytes(Receiver.bodies[-1])
    print(phase, "exit", done.returncode, "bodies", len(Receiver.bodies) - before, flush=True)  # noqa: T201


def with_process(code: str, work: Path, settle: float) -> subprocess.Popen[bytes]:
    ready = work / "ready"
    ready.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", code, str(ready)])
    deadline = time.time() + 180
    while not ready.exists():
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit(f"the GPU process did not start (exit {proc.poll()})")
        time.sleep(0.5)
    time.sleep(settle)  # NVML's utilization is over its last sample period
    return proc


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    work = Path(tempfile.mkdtemp())
    config = work / "config.json"
    config.write_text(
        json.dumps(
            {
                "serverUrl": f"http://127.0.0.1:{server.server_address[1]}",
                "hostId": "3f0c8b1e-0000-4000-8000-000000000001",
                "displayName": "device-check",
                "agentToken": "gua_agent_devcheck_notasecret",
                "tokenPrefix": "gua_agent_devcheck",
            }
        )
    )
    os.chmod(config, 0o600)
    spool = work / "spool"
    subprocess.run(["nvidia-smi", "-L"], check=False)
    push_once(config, spool, out, "idle")
    holder = with_process(HOLD, work, settle=3)
    push_once(config, spool, out, "held")
    holder.kill()
    holder.wait()
    busy = with_process(BUSY, work, settle=5)
    push_once(config, spool, out, "active")
    busy.kill()
    busy.wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
