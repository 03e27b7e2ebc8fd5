"""The fake collector: deterministic, four GPUs telling the same story, valid payloads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent import AGENT_VERSION
from agent.fake import FakeCollector
from agent.usage import UsageTracker

AT = datetime(2026, 12, 2, 17, 42, 36, 516146, tzinfo=UTC)


def test_deterministic_given_host_and_time() -> None:
    assert FakeCollector("a").observation(AT) == FakeCollector("a").observation(AT)
    assert FakeCollector("a").collect(AT) == FakeCollector("a").collect(AT)


def test_varies_with_time_and_host() -> None:
    fake = FakeCollector("a")
    utils = {fake.collect(AT + timedelta(seconds=s)).gpus[0].util_pct for s in range(30)}
    assert len(utils) > 5
    pids_a = [p.pid for g in FakeCollector("a").collect(AT).gpus for p in g.processes]
    pids_b = [p.pid for g in FakeCollector("b").collect(AT).gpus for p in g.processes]
    assert pids_a != pids_b


def test_the_four_gpus() -> None:
    gpus = FakeCollector("demo").collect(AT).gpus
    assert [g.uuid for g in gpus] == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]
    assert [g.usage_state for g in gpus] == ["active", "idle_held", "idle", "active"]
    owners = [sorted({p.linux_user for p in g.processes if p.type == "compute"}) for g in gpus]
    assert owners == [["alice"], ["bob"], [], ["carol", "dave"]]
    assert [p.type for p in gpus[2].processes] == ["graphics"]


def test_a_day_of_payloads_is_valid_and_stable(contract) -> None:
    fake = FakeCollector("demo-host")
    tracker = UsageTracker()
    for minute in range(0, 24 * 60, 7):
        at = AT + timedelta(minutes=minute)
        body = fake.observation(at, host_id="h1", display_name="Demo")
        contract(body)
        assert body["host"] == {
            "hostname": "demo-host",
            "agentVersion": AGENT_VERSION,
            "driverVersion": "560.35.05-fake",
            "hostId": "h1",
            "displayName": "Demo",
        }
        assert [g["usageState"] for g in body["gpus"]] == ["active", "idle_held", "idle", "active"]
        # The tick loop's tracker agrees with the fake's own states.
        tracked = tracker.apply(fake.collect(at), minute * 60.0)
        assert [g.usage_state for g in tracked.gpus] == [g["usageState"] for g in body["gpus"]]


def test_observation_defaults(contract) -> None:
    body = FakeCollector("x").observation(AT, agent_version="9.9.9")
    contract(body)
    assert body["observedAt"] == AT.isoformat()
    assert body["host"] == {
        "hostname": "x",
        "agentVersion": "9.9.9",
        "driverVersion": "560.35.05-fake",
    }


def test_minor_numbers_only_when_asked(contract) -> None:
    plain = FakeCollector("demo").observation(AT)
    contract(plain)
    assert all("minorNumber" not in g for g in plain["gpus"])

    ours = FakeCollector("demo", minor_numbers=True)
    body = ours.observation(AT)
    contract(body, ours=True)
    gpus = body["gpus"]
    assert [g["minorNumber"] for g in gpus] == [g["index"] for g in gpus]
    # The same story otherwise.
    assert [{k: v for k, v in g.items() if k != "minorNumber"} for g in gpus] == plain["gpus"]
