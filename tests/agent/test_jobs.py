"""Our agent's side of Slurm: a process's job from its cgroup, and `gua-agent job`
(the node's Prolog and Epilog) building job records, spooling them and sending them to
a real HTTP receiver, in order, never failing Slurm.

The environments are the ones a real slurmd gave (tests/slurm/data/*.env);
tests/slurm/test_agent_prolog.py runs the same commands from a real Slurm's Prolog.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.cli import main as agent_main
from agent.client import Answer
from agent.jobs import (
    JobEnvError,
    StartBook,
    exit_state,
    gpu_indexes,
    job_record,
    read_env,
    scontrol_start_time,
)
from agent.jobspool import JobSpool
from agent.procinfo import CGROUP_MAX_BYTES, ProcInfo, slurm_job_id
from tests.agent.fakes import REPO_ROOT, FakeBoard, FakeProcRoot, Reply, write_config

SAMPLES = REPO_ROOT / "tests" / "slurm" / "data"
JOBS = "/agent/v1/jobs"


def sample_env(name: str) -> dict[str, str]:
    lines = (SAMPLES / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


# --- a process's job, from /proc/PID/cgroup ------------------------------------------------


V2 = "0::/system.slice/slurmstepd.scope/job_4711/step_batch/user/task_0\n"
V2_MULTI = "0::/system.slice/node1_slurmstepd.scope/job_4712/step_0/user/task_0\n"


@pytest.mark.parametrize(
    ("text", "job"),
    [
        ((SAMPLES / "proc-pid-cgroup-v1.txt").read_text(), "198005"),  # a real v1 one
        ("6:freezer:/slurm/uid_1000/job_77/step_extern\n", "77"),
        ("6:freezer:/slurm/uid_1000/job_77\n", "77"),  # the job's own cgroup, no step
        (V2, "4711"),
        (V2_MULTI, "4712"),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
        ("0::/\n", None),
        ("", None),
        ("0::/system.slice/job_12x/step_0\n", None),  # not a number up to a slash
        ("0::/system.slice/myjob_12/step_0\n", None),  # a folder that is not Slurm's
        ("0::/slurm/job_12345678901/step_0\n", None),  # past a 32-bit job id
        ("0::/slurm/job_\u0661\u0662/step_0\n", None),  # digits, but not ASCII ones
        ("0::/job_/step_0\n", None),
    ],
)
def test_the_job_in_a_cgroup(text: str, job: str | None) -> None:
    assert slurm_job_id(text) == job


def test_a_process_outside_any_job_or_gone(proc_root: FakeProcRoot) -> None:
    proc_root.add(10, cgroup="0::/user.slice/user-1000.slice/session-3.scope\n")
    proc_root.add(11)  # no cgroup file at all
    (proc_root.add(12) / "cgroup").mkdir()  # not a file
    info = ProcInfo(proc_root.root)
    assert [info.job_id(pid) for pid in (10, 11, 12, 13)] == [None, None, None, None]


def test_a_hostile_cgroup_file_is_read_only_a_few_kib(proc_root: FakeProcRoot) -> None:
    info = ProcInfo(proc_root.root)
    # A job line past the first 4 KiB is never read.
    filler = ("9:x:/" + "a" * 90 + "\n") * (CGROUP_MAX_BYTES // 96 + 2)
    proc_root.add(20, cgroup=filler + V2)
    assert info.job_id(20) is None
    # A line cut at the limit is not read as a shorter job id (`job_12` of `job_123…`).
    cut = "9:x:/" + "a" * (CGROUP_MAX_BYTES - len("9:x:/") - 1 - len("0::/job_12")) + "\n"
    proc_root.add(21, cgroup=cut + "0::/job_123456/step_0\n")
    assert info.job_id(21) is None
    # Bytes that are not text and a NUL change nothing for a line that names a job.
    proc_root.add(22, cgroup=b"\xff\xfe\x00garbage\n" + V2.encode())
    assert info.job_id(22) == "4711"
    # A megabyte on one line: read at most the limit, no job.
    proc_root.add(23, cgroup=b"0::/" + b"job_1" * 200_000)
    assert info.job_id(23) is None


# --- the record, from the Prolog's and Epilog's environment --------------------------------


AT = datetime(2026, 12, 4, 21, 13, 46, 250000, tzinfo=UTC)


def test_a_prolog_environment_makes_a_running_record() -> None:
    env = sample_env("prolog_slurmd-trainer.env")
    job = read_env(env)
    record = job_record(job, state="RUNNING", started_at=AT, ended_at=None)
    assert record == {
        "cluster": "testlab",
        "jobId": env["SLURM_JOB_ID"],
        "rawJobId": env["SLURM_JOB_ID"],
        "restartCount": 0,
        "user": env["SLURM_JOB_USER"],
        "account": "physics",
        "partition": "gpu",
        "name": "",
        "state": "RUNNING",
        "startedAt": "2026-12-04T21:13:46.250000+00:00",
        "endedAt": None,
        "gpus": [0, 1, 2],
    }


def test_an_array_task_is_its_raw_id_and_no_account_is_empty() -> None:
    env = sample_env("prolog_slurmd-array-task.env")
    job = read_env(env)
    assert job.job_id == env["SLURM_JOB_ID"]
    assert "_" not in job.job_id
    assert read_env({**env, "SLURM_JOB_ACCOUNT": "(null)"}).account == ""
    without = {k: v for k, v in env.items() if k not in ("SLURM_JOB_ACCOUNT", "SLURM_JOB_GPUS")}
    assert (read_env(without).account, read_env(without).gpus) == ("", ())


def test_an_epilog_environment() -> None:
    env = sample_env("epilog_slurmd-completed.env")
    job = read_env(env)
    record = job_record(
        job, state=exit_state(env), started_at=AT, ended_at=AT + timedelta(minutes=5)
    )
    assert (record["state"], record["gpus"], record["restartCount"]) == ("COMPLETED", [0], 0)
    assert record["endedAt"] == "2026-12-04T21:18:46.250000+00:00"


@pytest.mark.parametrize(
    ("values", "state"),
    [
        ({"SLURM_JOB_EXIT_CODE": "0"}, "COMPLETED"),
        ({"SLURM_JOB_EXIT_CODE": "256"}, "FAILED"),  # `exit 1`: a wait status
        ({"SLURM_JOB_EXIT_CODE": "9"}, "FAILED"),  # killed
        ({"SLURM_JOB_EXIT_CODE": "0", "SLURM_JOB_DERIVED_EC": "256"}, "COMPLETED"),
        ({"SLURM_JOB_DERIVED_EC": "256"}, "FAILED"),
        ({"SLURM_JOB_EXIT_CODE": "garbage"}, "COMPLETED"),
        ({}, "COMPLETED"),
    ],
)
def test_exit_code_to_state(values: dict[str, str], state: str) -> None:
    assert exit_state(values) == state


@pytest.mark.parametrize(
    ("text", "gpus"),
    [
        ("0,2", (0, 2)),
        ("0-1,3", (0, 1, 3)),
        ("3", (3,)),
        ("1,1", (1,)),
        ("", ()),
        (None, ()),
        ("gpu:2", ()),
        ("2-0", ()),
        ("0,2000", ()),
        ("0-99999999", ()),
        ("-1", ()),
    ],
)
def test_gpu_indexes(text: str | None, gpus: tuple[int, ...]) -> None:
    assert gpu_indexes(text) == gpus


@pytest.mark.parametrize(
    "changed",
    [{"SLURM_JOB_ID": ""}, {"SLURM_JOB_ID": "12_3"}, {"SLURM_JOB_ID": "1" * 11}],
)
def test_no_job_id_no_record(changed: dict[str, str]) -> None:
    env = {**sample_env("prolog_slurmd-trainer.env"), **changed}
    env.pop("SLURM_JOBID", None)
    with pytest.raises(JobEnvError, match="SLURM_JOB_ID"):
        read_env(env)


def test_the_cluster_falls_back_to_the_config_and_odd_values_are_cleaned() -> None:
    env = sample_env("prolog_slurmd-trainer.env")
    del env["SLURM_CLUSTER_NAME"]
    with pytest.raises(JobEnvError, match="cluster"):
        read_env(env)
    assert read_env(env, "hpc").cluster == "hpc"
    odd = {**env, "SLURM_JOB_PARTITION": "gpu\x1b[31m" + "p" * 300, "SLURM_JOB_USER": ""}
    odd["SLURM_JOB_UID"] = "0"
    job = read_env(odd, "hpc")
    assert job.partition == ("gpu[31m" + "p" * 300)[:128]
    assert job.user == "root"  # from the uid when the name is missing
    assert read_env({**odd, "SLURM_JOB_RESTART_COUNT": "x"}, "hpc").restart_count == 0


def test_the_start_book_pairs_an_epilog_with_the_last_prolog(tmp_path: Path) -> None:
    book = StartBook(tmp_path / "starts")
    env = sample_env("prolog_slurmd-trainer.env")
    first = read_env({**env, "SLURM_JOB_RESTART_COUNT": "0"})
    book.remember(first, AT)
    # The epilog of the requeued run already sees restart count 1: it is run 0 that ended.
    requeued = read_env({**env, "SLURM_JOB_RESTART_COUNT": "1"})
    taken = book.take(requeued)
    assert taken is not None
    assert (taken.restart_count, taken.started_at) == (0, AT)
    assert book.take(requeued) is None  # taken once
    # The second run's prolog and epilog pair as themselves.
    book.remember(requeued, AT + timedelta(minutes=1))
    again = book.take(requeued)
    assert again is not None
    assert (again.restart_count, again.started_at) == (1, AT + timedelta(minutes=1))
    # Another cluster's job with the same id is another job.
    book.remember(read_env({**env, "SLURM_CLUSTER_NAME": "other"}), AT)
    assert book.take(first) is None


def test_the_start_book_is_bounded(tmp_path: Path) -> None:
    book = StartBook(tmp_path, max_entries=3)
    env = sample_env("prolog_slurmd-trainer.env")
    now = time.time()
    for n in range(6):
        book.remember(read_env({**env, "SLURM_JOB_ID": str(100 + n)}), AT)
        os.utime(next(tmp_path.glob(f"*.{100 + n}.0.json")), (now - 100 + n, now - 100 + n))
    assert sorted(p.name.split(".")[1] for p in tmp_path.glob("*.json")) == ["103", "104", "105"]
    # A start whose Epilog never came (the node crashed) goes after the age cap.
    old = StartBook(tmp_path / "old", max_age_s=3600)
    old.remember(read_env(env), AT)
    stale = next((tmp_path / "old").glob("*.json"))
    os.utime(stale, (now - 7200, now - 7200))
    old.remember(read_env({**env, "SLURM_JOB_ID": "7"}), AT)
    assert not stale.exists()


def test_scontrol_start_time_is_local_time(tmp_path: Path) -> None:
    """A stand-in scontrol printing what 22.05's prints (tests/slurm runs the real one)."""
    scontrol = tmp_path / "scontrol"
    text = (SAMPLES / "scontrol-show-job-d.txt").read_text()
    start = next(w for w in text.split() if w.startswith("StartTime="))
    scontrol.write_text(f"#!/bin/sh\necho 'JobId=$4 JobName=x {start} EndTime=Unknown'\n")
    scontrol.chmod(0o755)
    found = scontrol_start_time("4711", {"PATH": str(tmp_path)}, timeout=30)
    expected = datetime.fromisoformat(start.split("=", 1)[1]).astimezone(UTC)
    assert found == expected
    assert found is not None
    assert found.tzinfo is not None
    scontrol.write_text("#!/bin/sh\necho 'JobId=1 StartTime=Unknown'\n")
    assert scontrol_start_time("1", {"PATH": str(tmp_path)}, timeout=30) is None
    scontrol.write_text("#!/bin/sh\nexit 1\n")
    assert scontrol_start_time("1", {"PATH": str(tmp_path)}, timeout=30) is None


# --- the job spool -------------------------------------------------------------------------


def answers(*kinds: str) -> Iterator[Answer]:
    for kind in kinds:
        status = {"accepted": 202, "rejected": 422, "retry": 503}[kind]
        yield Answer(kind, status, f"HTTP {status}")  # type: ignore[arg-type]


def test_spool_sends_oldest_first_and_stops_at_a_failure(tmp_path: Path) -> None:
    spool = JobSpool(tmp_path)
    for n in range(4):
        spool.put(json.dumps({"jobs": [{"n": n}]}).encode())
    sent: list[int] = []
    replies = answers("accepted", "rejected", "retry")

    def post(body: bytes, budget: float) -> Answer:
        sent.append(json.loads(body)["jobs"][0]["n"])
        return next(replies)

    result = spool.drain(post, time.monotonic() + 60)
    assert sent == [0, 1, 2]
    assert (result.sent, result.dropped, result.left, result.stopped) == (1, 1, 2, "board")
    assert [json.loads(p.read_bytes())["jobs"][0]["n"] for p in spool.entries()] == [2, 3]


def test_spool_is_bounded_oldest_dropped(tmp_path: Path) -> None:
    spool = JobSpool(tmp_path, max_entries=3)
    for n in range(5):
        spool.put(json.dumps({"jobs": [{"n": n}]}).encode())
    assert [json.loads(p.read_bytes())["jobs"][0]["n"] for p in spool.entries()] == [2, 3, 4]
    small = JobSpool(tmp_path / "small", max_bytes=130)  # two of 61 bytes
    for n in range(5):
        small.put(json.dumps({"jobs": [{"n": n, "pad": "x" * 30}]}).encode())
    assert len(small) == 2
    assert small.put(b"x" * (64 * 1024 + 1)) is None


def test_a_spool_another_process_sends_is_left_to_it(tmp_path: Path) -> None:
    spool = JobSpool(tmp_path)
    spool.put(b'{"jobs": []}')
    fd = os.open(tmp_path / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        result = spool.drain(lambda b, t: Answer("accepted", 202, ""), time.monotonic() + 0.3)
    finally:
        os.close(fd)
    assert (result.sent, result.left, result.stopped) == (0, 1, "busy")


# --- `gua-agent job`, against a real HTTP receiver ------------------------------------------


@pytest.fixture
def slurm_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The process environment of a node's Prolog (the trainer job's, on 2 GPUs)."""
    for key in list(os.environ):
        if key.startswith("SLURM"):
            monkeypatch.delenv(key)
    env = sample_env("prolog_slurmd-trainer.env")
    env["SLURM_JOB_GPUS"] = "0,2"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def job(config: Path, spool: Path, *args: str) -> int:
    return agent_main(["job", *args, "--config", str(config), "--spool-dir", str(spool)])


def posted(board: FakeBoard) -> list[dict[str, Any]]:
    return [r.json for r in board.received if r.path == JOBS]


def test_prolog_and_epilog_send_one_run(
    tmp_path: Path,
    board: FakeBoard,
    slurm_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    agent_logging: None,
) -> None:
    config = write_config(tmp_path / "config.json", serverUrl=board.url)
    spool = tmp_path / "spool"
    board.default = Reply(202, {"accepted": 1})
    assert job(config, spool, "start") == 0
    monkeypatch.setenv("SLURM_JOB_EXIT_CODE", "256")
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "epilog_slurmd")
    assert job(config, spool, "end") == 0

    [start], [end] = (body["jobs"] for body in posted(board))
    assert start["state"] == "RUNNING"
    assert start["endedAt"] is None
    assert start["gpus"] == end["gpus"] == [0, 2]
    assert end["state"] == "FAILED"
    assert end["startedAt"] == start["startedAt"]
    assert datetime.fromisoformat(end["endedAt"]) >= datetime.fromisoformat(end["startedAt"])
    assert (start["jobId"], start["cluster"]) == (slurm_env["SLURM_JOB_ID"], "testlab")
    received = [r for r in board.received if r.path == JOBS]
    assert received[0].headers["authorization"].startswith("Bearer gua_agent_")
    assert received[0].headers["content-type"] == "application/json"
    assert JobSpool(spool / "jobs").entries() == []
    assert not list((spool / "job-starts").glob("*.json"))  # the epilog took its start


def test_board_down_spooled_then_sent_by_the_agent_in_order(
    tmp_path: Path,
    board: FakeBoard,
    slurm_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    agent_logging: None,
) -> None:
    down = write_config(tmp_path / "down.json", serverUrl="http://127.0.0.1:9")
    spool = tmp_path / "spool"
    assert job(down, spool, "start") == 0
    monkeypatch.setenv("SLURM_JOB_EXIT_CODE", "0")
    assert job(down, spool, "end") == 0
    # A second job starts meanwhile: three records wait, oldest first.
    monkeypatch.setenv("SLURM_JOB_ID", "424242")
    assert job(down, spool, "start") == 0
    assert len(JobSpool(spool / "jobs")) == 3
    # send-spool says records remain (it is for people and scripts, not for Slurm).
    assert job(down, spool, "send-spool", "--timeout", "1s") == 75

    # The board is back: the agent's next accepted snapshot sends them, in order.
    up = write_config(tmp_path / "up.json", serverUrl=board.url)
    argv = ["push-once", "--fake", "--config", str(up), "--spool-dir", str(spool)]
    assert agent_main(argv) == 0
    paths = [r.path for r in board.received]
    assert paths == ["/agent/v1/observations", JOBS, JOBS, JOBS]
    records = [body["jobs"][0] for body in posted(board)]
    assert [(r["jobId"], r["state"]) for r in records] == [
        (slurm_env["SLURM_JOB_ID"], "RUNNING"),
        (slurm_env["SLURM_JOB_ID"], "COMPLETED"),
        ("424242", "RUNNING"),
    ]
    assert records[0]["startedAt"] == records[1]["startedAt"]
    assert len(JobSpool(spool / "jobs")) == 0
    # Nothing of the job spool is taken for a snapshot, nor the other way round.
    assert [p.name for p in spool.iterdir() if p.is_file()] == []


def test_the_board_refusing_a_record_drops_only_that_one(
    tmp_path: Path, board: FakeBoard, slurm_env: dict[str, str], agent_logging: None
) -> None:
    config = write_config(tmp_path / "config.json", serverUrl=board.url)
    spool = tmp_path / "spool"
    # A board without the endpoint yet (404) keeps the record; a 422 drops it.
    board.answer(Reply(404, {"detail": "Not Found"}))
    assert job(config, spool, "start") == 0
    assert len(JobSpool(spool / "jobs")) == 1
    board.answer(Reply(422, {"detail": "The record is not valid."}))
    assert job(config, spool, "send-spool") == 0
    assert len(JobSpool(spool / "jobs")) == 0
    assert [r.status for r in board.received] == [404, 422]


def test_an_agent_service_sends_nothing_of_jobs_while_the_board_is_down(
    tmp_path: Path, board: FakeBoard, slurm_env: dict[str, str], agent_logging: None
) -> None:
    config = write_config(tmp_path / "config.json", serverUrl=board.url)
    spool = tmp_path / "spool"
    board.answer(Reply(503), Reply(503))
    assert job(config, spool, "start") == 0
    board.answer(*[Reply(503)] * 5)
    argv = ["push-once", "--fake", "--config", str(config), "--spool-dir", str(spool)]
    assert agent_main([*argv, "--retry-budget", "1s"]) == 75
    assert len(JobSpool(spool / "jobs")) == 1
    assert all(r.path == "/agent/v1/observations" for r in board.received[1:])


def test_an_epilog_with_no_remembered_start(
    tmp_path: Path,
    board: FakeBoard,
    slurm_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    agent_logging: None,
) -> None:
    config = write_config(tmp_path / "config.json", serverUrl=board.url)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no scontrol: sent as now
    monkeypatch.setenv("SLURM_JOB_RESTART_COUNT", "2")
    before = datetime.now(UTC)
    assert job(config, tmp_path / "spool", "end") == 0
    [record] = posted(board)[0]["jobs"]
    assert datetime.fromisoformat(record["startedAt"]) >= before
    assert record["startedAt"] <= record["endedAt"]
    assert record["restartCount"] == 2


# --- never a non-zero exit, never past the deadline -----------------------------------------


def run_agent(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )


def prolog_env(tmp_path: Path) -> dict[str, str]:
    """What slurmd gives a Prolog: SLURM_* and no PATH, no HOME."""
    return sample_env("prolog_slurmd-trainer.env")


@pytest.mark.parametrize(
    "case",
    ["no-config", "not-a-job", "bad-option", "bad-action", "spool-not-writable"],
)
def test_never_a_non_zero_exit(tmp_path: Path, case: str) -> None:
    env = prolog_env(tmp_path)
    config = write_config(tmp_path / "config.json")
    blocked = tmp_path / "file"
    blocked.write_text("a file where the spool folder would be")
    args = {
        "no-config": ["job", "start", "--config", str(tmp_path / "none.json")],
        "not-a-job": ["job", "end", "--config", str(config)],
        "bad-option": ["job", "start", "--bogus"],
        "bad-action": ["job", "begin"],
        "spool-not-writable": [
            "job",
            "start",
            "--config",
            str(config),
            "--spool-dir",
            str(blocked),
        ],
    }[case]
    if case == "not-a-job":
        env = {}
    done = run_agent(*args, "--timeout", "3s", env=env)
    assert done.returncode == 0, done.stderr


def test_a_board_that_never_answers_cannot_hold_the_prolog(
    tmp_path: Path, board: FakeBoard
) -> None:
    board.default = Reply(202, hang=600)
    config = write_config(tmp_path / "config.json", serverUrl=board.url)
    spool = tmp_path / "spool"
    argv = ["job", "start", "--config", str(config), "--spool-dir", str(spool), "--timeout", "2s"]
    done = run_agent(*argv, env=prolog_env(tmp_path))
    assert done.returncode == 0, done.stderr
    # The board got it but never said so: it stays spooled, and is sent again (the
    # board keys records by cluster, job id and restart count: the same record twice is
    # one record).
    assert len(board.received) == 1
    assert len(JobSpool(spool / "jobs")) == 1


def test_sigterm_from_slurmd_is_exit_0(tmp_path: Path, board: FakeBoard) -> None:
    board.default = Reply(202, hang=600)
    config = write_config(tmp_path / "config.json", serverUrl=board.url)
    argv = ["job", "start", "--config", str(config), "--spool-dir", str(tmp_path / "spool")]
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", *argv, "--timeout", "60s"],
        env={**prolog_env(tmp_path), "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not board.received and time.monotonic() < deadline:
            time.sleep(0.05)
        assert board.received, "the record was never sent"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()
    assert len(JobSpool(tmp_path / "spool" / "jobs")) == 1


def test_a_board_that_keeps_failing_is_warned_about_once(tmp_path: Path, caplog) -> None:
    spool = JobSpool(tmp_path)
    spool.put(b'{"jobs": []}')
    with caplog.at_level("WARNING", logger="agent.jobspool"):
        for _ in range(5):
            spool.drain(lambda b, t: Answer("rejected", 404, "HTTP 404"), time.monotonic() + 60)
    assert len([r for r in caplog.records if "not sent" in r.getMessage()]) == 1
    assert len(spool) == 1
