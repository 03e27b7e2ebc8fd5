"""The payload matches the released agent's byte for byte (apart from agentVersion)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from agent.model import Collection, GpuReading, ProcessReading
from agent.payload import HostIdentity, build_observation, encode_observation
from board.ingest.schemas import SnapshotIn
from tests.agent.fakes import (
    check_contract,
)


def released_fake_collection() -> Collection:
    """The GPUs of examples/observation-1.8.0-fake.json as our collector would read them."""
    a6000 = "NVIDIA RTX A6000"
    return Collection(
        driver_version="560.35.05-fake",
        gpus=(
            GpuReading(
                0,
                "GPU-0",
                a6000,
                49140,
                49140,
                80,
                80,
                150,
                (ProcessReading(1234, "alice", "python", "compute", 70000),),
                usage_state="active",
            ),
            GpuReading(
                1,
                "GPU-1",
                a6000,
                49140,
                8200,
                2,
                41,
                72,
                (
                    ProcessReading(5678, "bob", "jupyter", "compute", 8000),
                    ProcessReading(9999, "unknown", "unknown", "compute", 200),
                ),
                usage_state="idle_held",
            ),
            GpuReading(
                2,
                "GPU-2",
                a6000,
                49140,
                128,
                0,
                40,
                70,
                (ProcessReading(1200, "gdm", "Xorg", "graphics", 128),),
                usage_state="idle",
            ),
        ),
    )


def test_same_bytes_as_released_agent(example, contract) -> None:
    released = example("observation-1.8.0-fake.json")
    host = HostIdentity("vm", "1.8.0", "h1", "host-one")
    observed_at = datetime.fromisoformat(released["observedAt"])

    ours = build_observation(released_fake_collection(), host, observed_at)

    contract(ours)
    assert ours == released
    # Same keys in the same order, serialised the same way.
    assert encode_observation(ours) == json.dumps(released).encode()


def test_error_heartbeat_same_as_released(example, contract) -> None:
    released = example("observation-1.3.0-error-heartbeat.json")
    host = HostIdentity("vm", "1.3.0", "h1", "host-one")
    observed_at = datetime.fromisoformat(released["observedAt"])
    ours = build_observation(Collection.failed("nvml_init_failed"), host, observed_at)
    contract(ours)
    assert encode_observation(ours) == json.dumps(released).encode()


def test_observed_at_always_utc_offset() -> None:
    seoul = timezone(timedelta(hours=9))
    at = datetime(2026, 12, 3, 2, 42, 36, 516146, tzinfo=seoul)
    body = build_observation(Collection.failed("x"), HostIdentity("h", "0.1.0"), at)
    assert body["observedAt"] == "2026-12-02T17:42:36.516146+00:00"
    assert "hostId" not in body["host"]
    assert "displayName" not in body["host"]


def test_naive_time_refused() -> None:
    with pytest.raises(ValueError, match="timezone"):
        build_observation(Collection.failed("x"), HostIdentity("h", "0"), datetime(2026, 1, 1))


def test_status_and_errors_must_agree() -> None:
    with pytest.raises(ValueError, match="no errors"):
        Collection("1", (), status="ok", errors=("x",))
    with pytest.raises(ValueError, match="at least one"):
        Collection("1", (), status="partial")


def test_out_of_range_readings_clamped(contract) -> None:
    odd = GpuReading(-1, "GPU-z", "", 100, 400, 140, -3, -1, ())
    body = build_observation(Collection("1", (odd,)), HostIdentity("h", "0"), datetime.now(UTC))
    contract(body)
    gpu = body["gpus"][0]
    assert (gpu["index"], gpu["name"], gpu["utilPct"], gpu["memoryUsedMb"]) == (
        0,
        "unknown",
        100,
        100,
    )
    assert (gpu["temperatureC"], gpu["powerW"]) == (0, 0)
    assert "usageState" not in gpu


HOSTILE = [
    "nul\x00inside",
    "new\nline",
    "x" * 10_000,
    "bad\udcffutf8",
    "\udcc3\udca9",
    "\ud800lone",
    "\t\r\n",
    "",
    "=cmd|' /C calc'!A0",
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_names_still_make_a_snapshot_the_board_takes(text: str) -> None:
    proc = ProcessReading(5, text, text, "compute", 10)
    gpu = GpuReading(0, "GPU-" + text, text, 81920, 100, 50, 40, 300, (proc,))
    collection = Collection(driver_version=text, gpus=(gpu,))
    host = HostIdentity(text, "1.0.0", text, text)
    payload = build_observation(collection, host, datetime.now(UTC))
    check_contract(payload)
    body = encode_observation(payload)
    body.decode("utf-8")  # strict: no lone surrogate survives
    snapshot = SnapshotIn.model_validate_json(body)
    assert snapshot.gpus[0].processes[0].pid == 5
