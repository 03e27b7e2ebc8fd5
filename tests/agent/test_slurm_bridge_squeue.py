"""Reading squeue --json: the real 22.05 capture, and the shapes of 23.02, 23.11 and 24.05
(tests/slurm/data/README.md says where those come from)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent import slurm_squeue
from agent.slurm_squeue import (
    SlurmJob,
    SqueueError,
    gpu_indexes,
    job_state,
    number,
    parse_job,
    parse_squeue,
)

DATA = Path(__file__).resolve().parents[1] / "slurm" / "data"
SHAPES = ["squeue.json", "squeue-v0.0.39.json", "squeue-v0.0.40.json", "squeue-v0.0.41.json"]


def listing(name: str) -> dict[str, SlurmJob]:
    parsed = parse_squeue((DATA / name).read_bytes())
    assert parsed.skipped == 0
    return {job.raw_job_id: job for job in parsed.jobs}


def test_the_real_22_05_capture() -> None:
    jobs = listing("squeue.json")
    assert len(jobs) == 8

    trainer = jobs["198001"]
    assert (trainer.job_id, trainer.restart_count, trainer.cluster) == ("198001", 0, "testlab")
    assert (trainer.user, trainer.account, trainer.partition) == ("nobody", "physics", "gpu")
    assert (trainer.name, trainer.state) == ("trainer", "RUNNING")
    assert trainer.allocations == (("node1", (0, 1, 2)),)
    assert trainer.start_time == 1796419157
    assert trainer.end_time is not None
    assert trainer.end_time - trainer.start_time > 364 * 86400

    wide = jobs["198002"]
    assert wide.allocations == (("node1", (3,)), ("node2", (0,)))

    # An array task: its own raw id, the display id of its array.
    task = jobs["198005"]
    assert (task.job_id, task.allocations) == ("198004_0", (("node2", (1,)),))
    assert jobs["198007"].job_id == "198004_2"
    # The task still waiting holds the array's own id.
    assert (jobs["198004"].job_id, jobs["198004"].state) == ("198004_3", "PENDING")

    retry = jobs["198003"]
    assert (retry.state, retry.restart_count, retry.allocations) == ("PENDING", 1, ())

    ended = jobs["198000"]
    assert (ended.state, ended.allocations, ended.asked_for_gpus) == ("COMPLETED", (), True)


@pytest.mark.parametrize("name", SHAPES[1:])
def test_newer_shapes_read_as_the_same_jobs(name: str) -> None:
    assert listing(name) == listing("squeue.json")


def test_the_release_is_read_from_either_meta_spelling() -> None:
    assert parse_squeue((DATA / "squeue.json").read_bytes()).release == "22.05.8"
    assert parse_squeue((DATA / "squeue-v0.0.40.json").read_bytes()).release == "23.11.10"


@pytest.mark.parametrize(
    ("detail", "gpus"),
    [
        ("gpu:2(IDX:0-1)", (0, 1)),
        ("gpu:a100:2(IDX:1,3)", (1, 3)),
        ("gpu:4(IDX:0-1,3,5-6)", (0, 1, 3, 5, 6)),
        ("gpu:1(IDX:0),gpu:v100:1(IDX:2),nic:1(IDX:0)", (0, 2)),
        ("nic:1(IDX:0-1),gpu:h100:1(IDX:7)", (7,)),
        ("gpu(CNT:2)", ()),
        ("gpu:2(IDX:N/A)", ()),
        ("gpu:2(IDX:3-1)", ()),
        ("gpu:2(IDX:0-99999999)", ()),
        ("", ()),
        ("mps:100(IDX:0)", ()),
    ],
)
def test_gres_detail_of_one_node(detail: str, gpus: tuple[int, ...]) -> None:
    assert gpu_indexes(detail) == gpus


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("RUNNING", ("RUNNING", "RUNNING")),
        (["RUNNING"], ("RUNNING", "RUNNING")),
        (["PENDING", "REQUEUED"], ("REQUEUED", "PENDING")),
        (["COMPLETED", "COMPLETING"], ("COMPLETING", "COMPLETED")),
        (["RUNNING", "CONFIGURING"], ("CONFIGURING", "RUNNING")),
        ([], (None, "")),
        (None, (None, "")),
        (7, (None, "")),
    ],
)
def test_job_state_as_squeue_prints_it(value: Any, expected: tuple[str | None, str]) -> None:
    assert job_state(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 5),
        ({"set": True, "infinite": False, "number": 5}, 5),
        ({"set": False, "infinite": False, "number": 0}, None),
        ({"set": False, "infinite": True, "number": 0}, None),
        ({"set": True, "infinite": False, "number": "5"}, None),
        (True, None),
        (None, None),
        ("5", None),
    ],
)
def test_numbers_plain_or_wrapped(value: Any, expected: int | None) -> None:
    assert number(value) == expected


def _entry(**changes: Any) -> dict[str, Any]:
    data = json.loads((DATA / "squeue.json").read_text())
    entry: dict[str, Any] = next(j for j in data["jobs"] if j["job_id"] == 198001)
    entry.update(changes)
    return entry


def test_strings_are_bounded_and_cleaned() -> None:
    job = parse_job(_entry(name="x" * 10_000, account="ph\nys\x00ics", partition="p" * 500))
    assert job is not None
    assert len(job.name) == slurm_squeue.MAX_NAME_CHARS
    assert job.account == "physics"
    assert len(job.partition) == slurm_squeue.MAX_FIELD_CHARS


@pytest.mark.parametrize(
    "changes",
    [
        {"job_id": None},
        {"job_id": "198001"},
        {"job_id": 0},
        {"user_name": ""},
        {"user_name": 12},
        {"job_state": None},
        {"job_state": {"x": 1}},
    ],
)
def test_an_entry_without_id_user_or_state_is_passed_over(changes: dict[str, Any]) -> None:
    assert parse_job(_entry(**changes)) is None
    out = json.dumps({"jobs": [_entry(**changes), _entry(), 5, "x"]}).encode()
    parsed = parse_squeue(out)
    assert (len(parsed.jobs), parsed.skipped) == (1, 3)


@pytest.mark.parametrize(
    "changes",
    [
        {"gres_detail": "gpu:1(IDX:0)"},
        {"gres_detail": [None]},
        {"gres_detail": [5]},
        {"job_resources": None},
        {"job_resources": {"allocated_nodes": "node1"}},
        {"job_resources": {"allocated_nodes": [5]}},
        {"start_time": -5},
        {"start_time": 10**20},
        {"restart_cnt": "x"},
    ],
)
def test_odd_fields_do_not_break_an_entry(changes: dict[str, Any]) -> None:
    job = parse_job(_entry(**changes))
    assert job is not None
    assert job.restart_count == 0


@pytest.mark.parametrize(
    "output",
    [b"", b"not json", b"[]", b'{"jobs": 5}', b'{"meta": {}}', b"[" * 100_000, b"\xff\xfe"],
)
def test_output_that_is_no_listing_is_refused(output: bytes) -> None:
    with pytest.raises(SqueueError):
        parse_squeue(output)


def test_output_over_the_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_squeue, "MAX_OUTPUT_BYTES", 100)
    with pytest.raises(SqueueError, match="refused"):
        parse_squeue(b'{"jobs": []}' + b" " * 100)


def test_squeue_errors_are_kept_short() -> None:
    out = json.dumps({"jobs": [], "errors": [{"error": "e" * 1000}] * 20}).encode()
    errors = parse_squeue(out).errors
    assert len(errors) == 5
    assert all(len(e) == 200 for e in errors)
