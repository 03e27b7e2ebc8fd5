"""The `gua-agent` command line: enroll, push-once, run — and that no token is ever printed."""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import AGENT_VERSION, fsutil
from agent.cli import EXIT_CONFIG, EXIT_FAILED, EXIT_OK, EXIT_REVOKED, EXIT_SPOOLED, main
from agent.cli import main as agent_main
from agent.config import AgentConfig, default_config_path, default_spool_dir
from tests.agent.fakes import REPO_ROOT, FakeBoard, Reply, write_config

ENROLL_TOKEN = "gua_enroll_one_time_secret_7f3a"
AGENT_TOKEN = "gua_agent_very_secret_token_9c1e2b"
CLAIMED = {
    "hostId": "h-42",
    "displayName": "gpu-node-7",
    "agentToken": AGENT_TOKEN,
    "tokenPrefix": "gua_agent_ve",
}


def enroll(board: FakeBoard, config: Path, *extra: str) -> int:
    return main(
        [
            "enroll",
            "--server-url",
            board.url + "/",
            "--enrollment-token",
            ENROLL_TOKEN,
            "--config",
            str(config),
            *extra,
        ]
    )


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert ENROLL_TOKEN not in text
        assert AGENT_TOKEN not in text


def test_enroll_writes_config_0600_and_prints_prefix_only(
    board: FakeBoard, tmp_path: Path, capsys
) -> None:
    board.answer(Reply(201, CLAIMED))
    config = tmp_path / "etc" / "config.json"
    assert enroll(board, config) == EXIT_OK

    out, err = capsys.readouterr()
    assert_no_secret(out, err)
    assert "gua_agent_ve" in out
    assert "gpu-node-7" in out
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text()) == {
        "serverUrl": board.url,
        "hostId": "h-42",
        "displayName": "gpu-node-7",
        "agentToken": AGENT_TOKEN,
        "tokenPrefix": "gua_agent_ve",
    }
    (claim,) = board.received
    assert claim.path == "/agent/v1/enrollments/claim"
    body = claim.json
    assert body["enrollmentToken"] == ENROLL_TOKEN
    assert body["agentVersion"] == AGENT_VERSION
    assert set(body) <= {"enrollmentToken", "hostname", "agentVersion", "driverVersion"}
    assert [p.name for p in config.parent.iterdir()] == ["config.json"]  # no temp left


def test_enroll_refuses_to_overwrite_without_force(
    board: FakeBoard, tmp_path: Path, capsys
) -> None:
    config = tmp_path / "config.json"
    config.write_text("{}")
    assert enroll(board, config) == EXIT_CONFIG
    _, err = capsys.readouterr()
    assert "--force" in err
    assert board.received == []  # the one-time token was not spent
    assert config.read_text() == "{}"

    board.answer(Reply(201, CLAIMED))
    assert enroll(board, config, "--force") == EXIT_OK
    assert json.loads(config.read_text())["hostId"] == "h-42"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600


def test_enroll_display_name_override(board: FakeBoard, tmp_path: Path) -> None:
    board.answer(Reply(201, CLAIMED))
    config = tmp_path / "config.json"
    assert enroll(board, config, "--display-name", "Rack 3 / node 7") == EXIT_OK
    assert json.loads(config.read_text())["displayName"] == "Rack 3 / node 7"
    assert "displayName" not in board.received[0].json  # not part of the claim contract


def test_enroll_token_from_stdin(board: FakeBoard, tmp_path: Path, monkeypatch, capsys) -> None:
    board.answer(Reply(201, CLAIMED))
    monkeypatch.setattr(sys, "stdin", io.StringIO(ENROLL_TOKEN + "\n"))
    config = tmp_path / "config.json"
    assert (
        main(
            [
                "enroll",
                "--server-url",
                board.url,
                "--enrollment-token",
                "-",
                "--config",
                str(config),
            ]
        )
        == EXIT_OK
    )
    assert board.received[0].json["enrollmentToken"] == ENROLL_TOKEN
    assert_no_secret(*capsys.readouterr())


@pytest.mark.parametrize(
    "reply",
    [
        Reply(401, {"detail": f"enrollment token {ENROLL_TOKEN} is not valid"}),
        Reply(403, {"detail": "enrollment token already used"}),
        Reply(201, {**CLAIMED, "tokenPrefix": ""}),
        Reply(201, {k: v for k, v in CLAIMED.items() if k != "hostId"}),
        Reply(500, b"oops"),
    ],
)
def test_enroll_refused_writes_nothing(board: FakeBoard, tmp_path: Path, capsys, reply) -> None:
    board.answer(reply)
    config = tmp_path / "config.json"
    assert enroll(board, config) == EXIT_FAILED
    out, err = capsys.readouterr()
    assert_no_secret(out, err)  # even when a careless board echoes the token
    assert "gua-agent:" in err
    assert not config.exists()


def test_enroll_unreachable(tmp_path: Path, capsys) -> None:
    code = main(
        [
            "enroll",
            "--server-url",
            "http://127.0.0.1:9",
            "--enrollment-token",
            ENROLL_TOKEN,
            "--config",
            str(tmp_path / "c.json"),
            "--connect-timeout",
            "1s",
        ]
    )
    assert code == EXIT_FAILED
    out, err = capsys.readouterr()
    assert "could not reach" in err
    assert_no_secret(out, err)


def test_enroll_bad_url(tmp_path: Path, capsys) -> None:
    code = main(
        [
            "enroll",
            "--server-url",
            "board.example",
            "--enrollment-token",
            "x",
            "--config",
            str(tmp_path / "c.json"),
        ]
    )
    assert code == EXIT_CONFIG
    assert "http://" in capsys.readouterr().err


def test_config_write_is_atomic(tmp_path: Path, monkeypatch) -> None:
    """A crash between write and rename leaves the old config whole and no temp file."""
    config = tmp_path / "config.json"
    config.write_text('{"old": true}')

    def crash(src: object, dst: object) -> None:
        raise OSError("power cut")

    monkeypatch.setattr(fsutil.os, "replace", crash)
    new = AgentConfig("https://b", "h", "n", AGENT_TOKEN, "p")
    with pytest.raises(OSError, match="power cut"):
        fsutil.atomic_write(config, new.to_json())
    assert config.read_text() == '{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_default_paths(tmp_path: Path) -> None:
    env = {"HOME": "/home/alice"}
    assert default_config_path(env, root=True) == Path("/etc/gua-agent/config.json")
    assert default_config_path(env, root=False) == Path("/home/alice/.config/gua-agent/config.json")
    assert default_config_path({**env, "XDG_CONFIG_HOME": "/x"}, root=False) == Path(
        "/x/gua-agent/config.json"
    )
    assert default_config_path({**env, "XDG_CONFIG_HOME": "rel"}, root=False) == Path(
        "/home/alice/.config/gua-agent/config.json"
    )
    assert default_config_path({"GUA_AGENT_CONFIG": "/c.json"}, root=True) == Path("/c.json")
    assert default_spool_dir("h1", env, root=True) == Path("/var/lib/gua-agent/spool/h1")
    assert default_spool_dir("h/../1", {**env, "XDG_STATE_HOME": "/s"}, root=False) == Path(
        "/s/gua-agent/spool/h_.._1"
    )
    assert default_spool_dir("h1", {"GUA_AGENT_SPOOL_DIR": "/sp"}, root=True) == Path("/sp")


# --- push-once ---------------------------------------------------------------------------


@pytest.fixture
def enrolled(board: FakeBoard, tmp_path: Path) -> Path:
    config = tmp_path / "config.json"
    config.write_text(
        AgentConfig(board.url, "h-42", "gpu-node-7", AGENT_TOKEN, "gua_agent_ve").to_json().decode()
    )
    config.chmod(0o600)
    return config


def push_once(config: Path, tmp_path: Path, *extra: str) -> int:
    return main(
        [
            "push-once",
            "--fake",
            "--config",
            str(config),
            "--spool-dir",
            str(tmp_path / "spool"),
            "--hostname",
            "fakehost",
            *extra,
        ]
    )


def test_push_once_fake(board: FakeBoard, enrolled: Path, tmp_path: Path, contract, capsys) -> None:
    assert push_once(enrolled, tmp_path) == EXIT_OK
    (obs,) = board.observations()
    assert obs.headers["authorization"] == f"Bearer {AGENT_TOKEN}"
    body = obs.json
    contract(body)
    assert body["host"] == {
        "hostname": "fakehost",
        "agentVersion": AGENT_VERSION,
        "driverVersion": "560.35.05-fake",
        "hostId": "h-42",
        "displayName": "gpu-node-7",
    }
    assert len(body["gpus"]) == 4
    assert_no_secret(*capsys.readouterr())


def test_push_once_401_exits_revoked(
    board: FakeBoard, enrolled: Path, tmp_path: Path, capsys
) -> None:
    board.answer(Reply(401, {"detail": "host revoked"}))
    assert push_once(enrolled, tmp_path) == EXIT_REVOKED
    out, err = capsys.readouterr()
    assert "revoked" in err
    assert "gua-agent enroll --force" in err
    assert_no_secret(out, err)


def test_push_once_rejected(board: FakeBoard, enrolled: Path, tmp_path: Path, capsys) -> None:
    board.answer(Reply(422, {"detail": "observedAt is in the future"}))
    assert push_once(enrolled, tmp_path) == EXIT_FAILED
    assert "HTTP 422: observedAt is in the future" in capsys.readouterr().err


def test_push_once_spools_then_replays(board: FakeBoard, enrolled: Path, tmp_path: Path) -> None:
    board.default = Reply(503)
    assert push_once(enrolled, tmp_path, "--retry-budget", "300ms") == EXIT_SPOOLED
    first = board.observed_at()[0]
    assert len(list((tmp_path / "spool").glob("*.json"))) == 1
    board.default = Reply(202, {})
    time.sleep(0.01)
    assert push_once(enrolled, tmp_path) == EXIT_OK
    accepted = board.observed_at(status=202)
    assert accepted[1] == first
    assert len(accepted) == 2
    assert list((tmp_path / "spool").glob("*.json")) == []


def test_push_once_without_config(tmp_path: Path, capsys) -> None:
    assert main(["push-once", "--fake", "--config", str(tmp_path / "none.json")]) == EXIT_CONFIG
    assert "gua-agent enroll" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["not json", "[]", '{"serverUrl": "https://b"}'])
def test_push_once_invalid_config(tmp_path: Path, capsys, content: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(content)
    assert main(["push-once", "--fake", "--config", str(config)]) == EXIT_CONFIG
    assert str(config) in capsys.readouterr().err


def test_push_once_print_needs_no_board(tmp_path: Path, capsys, contract) -> None:
    assert (
        main(
            [
                "push-once",
                "--fake",
                "--print",
                "--hostname",
                "demo",
                "--config",
                str(tmp_path / "none.json"),
            ]
        )
        == EXIT_OK
    )
    body = json.loads(capsys.readouterr().out)
    contract(body)
    assert body["host"]["hostname"] == "demo"


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--interval", "100ms"],
        ["run", "--interval", "soon"],
        ["push-once", "--spool-max-size", "1Q"],
    ],
)
def test_bad_flags_are_usage_errors(args: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2


# --- run, as a real process ----------------------------------------------------------------


def start_agent(config: Path, spool: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent",
            "--log-level",
            "DEBUG",
            "run",
            "--fake",
            "--interval",
            "1s",
            "--config",
            str(config),
            "--spool-dir",
            str(spool),
            *extra,
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_run_ticks_and_stops_cleanly(
    board: FakeBoard, enrolled: Path, tmp_path: Path, contract, sig
) -> None:
    proc = start_agent(enrolled, tmp_path / "spool")
    wait_for(lambda: len(board.observations()) >= 3)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert_no_secret(out, err)
    times = [r.json["observedAt"] for r in board.observations()]
    for body in (r.json for r in board.observations()):
        contract(body)
    from datetime import datetime

    stamps = [datetime.fromisoformat(t).timestamp() for t in times]
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:], strict=False))
    # A tick a second: no burst, no double tick. A loaded machine may delay one tick,
    # so the typical gap is checked, not every gap.
    assert 0.8 < gaps[len(gaps) // 2] < 1.5, gaps
    assert gaps[0] > 0.5, gaps


def test_sigterm_abandons_hung_send_and_spools(
    board: FakeBoard, enrolled: Path, tmp_path: Path
) -> None:
    board.default = Reply(202, {}, hang=300)
    proc = start_agent(enrolled, tmp_path / "spool", "--read-timeout", "600s")
    wait_for(lambda: len(board.observations()) >= 1)
    time.sleep(0.2)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    # The send hangs for 300 s: stopping well before that means it was abandoned.
    assert time.monotonic() - started < 120
    spooled = sorted((tmp_path / "spool").glob("*.json"))
    assert len(spooled) == 1
    assert json.loads(spooled[0].read_text())["observedAt"] == board.observed_at()[0]
    assert_no_secret(out, err)


def test_run_exits_3_when_revoked(board: FakeBoard, enrolled: Path, tmp_path: Path) -> None:
    board.answer(Reply(202), Reply(401, {"detail": "host revoked by an admin"}))
    proc = start_agent(enrolled, tmp_path / "spool")
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == EXIT_REVOKED
    assert "host revoked by an admin" in err
    assert_no_secret(out, err)


def test_agent_imports_no_web_stack() -> None:
    code = (
        "import sys, agent.cli, agent.fake, agent.nvml, agent.runner;"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('fastapi', 'sqlalchemy', 'pydantic', 'starlette', 'board', 'psycopg', 'uvicorn')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_agent_source_imports_only_stdlib_httpx_pynvml_websockets() -> None:
    import ast

    # websockets: the live stream's client (agent/stream.py).
    allowed = set(sys.stdlib_module_names) | {"agent", "httpx", "pynvml", "websockets"}
    for path in (REPO_ROOT / "agent").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


@pytest.mark.parametrize("age", ["1000000000d", "9" * 400])
def test_an_overflowing_spool_max_age_is_a_usage_error(
    tmp_path: Path, age: str, agent_logging: None
) -> None:
    """Was: `gua-agent push-once --spool-max-age 1000000000d` ended in OverflowError
    ("days=1000000000; must have magnitude <= 999999999") and 400 nines (parsed to inf) in
    OverflowError ("cannot convert float infinity to integer"), both from
    timedelta(seconds=…) in cmd_push after the config was read: a traceback and exit 1.
    A bad command-line value is exit 2 with a sentence (docs/agent.md, Exit codes)."""
    config = write_config(tmp_path / "config.json")
    argv = ["push-once", "--fake", "--config", str(config), "--spool-max-age", age]
    with pytest.raises(SystemExit) as exited:
        agent_main([*argv, "--spool-dir", str(tmp_path / "spool"), "--retry-budget", "1s"])
    assert exited.value.code == 2
