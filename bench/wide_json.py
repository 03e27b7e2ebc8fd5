"""What a JSON body of many unknown keys costs a worker to refuse, and what the check
against it costs the bodies that pass.

    .venv/bin/python bench/wide_json.py
    (before: PYTHONPATH=<a checkout> .venv/bin/python <that checkout>/bench/wide_json.py)

Each case runs in a fresh process (so its peak RSS, VmHWM, is its own), in-process, no
database:

- push: `board.ingest.service.parse_snapshot` of a 1 MiB body of 80,000 unknown keys;
- api: a FastAPI route taking a strict body model, with the board's error handlers and,
  where the checkout has it, the board's app-wide width check, sent 60,000 unknown keys
  (the answer's size is printed too);
- ordinary push, large push: `parse_snapshot` of a valid push of 8 GPUs × 2 processes
  (~170 colons) and of 64 GPUs × 16 processes (~6,900 colons: past the gate, so parsed
  once more for the check), microseconds per call.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

CASES = ("push", "api", "ordinary push", "large push")


class Booking(BaseModel):
    """A strict body model, as the API's are (at module level: the route's annotation is
    a string, which FastAPI resolves in this module's globals)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    hostId: str


def _peak_mib() -> float:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def _push(gpus: int, processes: int) -> dict[str, Any]:
    return {
        "schemaVersion": "availability.snapshot.v1",
        "collectionStatus": "ok",
        "errors": [],
        "observedAt": datetime.now(UTC).isoformat(),
        "host": {"hostname": "bench", "agentVersion": "1.8.0", "driverVersion": "550.54"},
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-{i}",
                "name": "NVIDIA RTX A6000",
                "memoryTotalMb": 49140,
                "memoryUsedMb": 8300,
                "utilPct": 85,
                "temperatureC": 82,
                "powerW": 155,
                "usageState": "active",
                "processes": [
                    {
                        "pid": 1000 + 10 * i + j,
                        "linuxUser": "alice",
                        "name": "python",
                        "type": "compute",
                        "memoryUsedMb": 1000,
                    }
                    for j in range(processes)
                ],
            }
            for i in range(gpus)
        ],
    }


def _run_case(case: str) -> dict[str, Any]:
    from board.errors import DomainError
    from board.ingest.service import parse_snapshot

    if case == "push":
        body = json.dumps({f"k{i}": 0 for i in range(80_000)}).encode()
        before = _peak_mib()
        started = time.perf_counter()
        try:
            parse_snapshot(body)
            status = 200
        except DomainError as exc:
            status = exc.status_code
        return {
            "status": status,
            "ms": (time.perf_counter() - started) * 1000,
            "peak_growth_mib": _peak_mib() - before,
            "body_kib": len(body) / 1024,
        }
    if case == "api":
        return _api_case()
    gpus, processes = (8, 2) if case == "ordinary push" else (64, 16)
    body = json.dumps(_push(gpus, processes)).encode()
    try:
        parse_snapshot(body)
    except DomainError as exc:
        raise SystemExit(f"the {case} is not valid: {exc.detail}") from None
    rounds = 2000 if case == "ordinary push" else 100
    started = time.perf_counter()
    for _ in range(rounds):
        parse_snapshot(body)
    return {
        "us_per_call": (time.perf_counter() - started) / rounds * 1e6,
        "colons": body.count(b":"),
        "body_kib": len(body) / 1024,
    }


def _api_case() -> dict[str, Any]:
    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient

    import board
    from board.errors import install_error_handlers

    dependencies = []
    # Looked for beside the board imported (an editable install finds board.* elsewhere).
    if (Path(board.__file__).parent / "jsonbodies.py").exists():
        from board.jsonbodies import refuse_wide_json_bodies

        dependencies = [Depends(refuse_wide_json_bodies)]

    app = FastAPI(dependencies=dependencies)
    install_error_handlers(app)

    @app.post("/api/booking")
    def book(body: Booking) -> dict[str, str]:
        return {"hostId": body.hostId}

    client = TestClient(app)
    headers = {"Content-Type": "application/json"}
    client.post("/api/booking", content=b'{"hostId": "x"}', headers=headers)  # warm-up
    body = json.dumps({"hostId": "x", **{f"k{i}": 0 for i in range(60_000)}}).encode()
    before = _peak_mib()
    started = time.perf_counter()
    reply = client.post("/api/booking", content=body, headers=headers)
    assert b"Extra inputs" in reply.content or b"64 keys" in reply.content, reply.text[:200]
    return {
        "status": reply.status_code,
        "ms": (time.perf_counter() - started) * 1000,
        "peak_growth_mib": _peak_mib() - before,
        "answer_kib": len(reply.content) / 1024,
        "check": bool(dependencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(_run_case(args.case)))
        return
    import board

    print(f"board imported from {Path(board.__file__).parent}")
    for case in CASES:
        done = subprocess.run(
            [sys.executable, __file__, "--case", case],
            capture_output=True,
            text=True,
            check=True,
        )
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        shown = ", ".join(
            f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()
        )
        print(f"{case:>14}: {shown}")


if __name__ == "__main__":
    main()
