"""The agent's config file: written 0600 in a 0700 directory, a symlink replaced rather
than followed, a corrupt one a config error that never shows the token, and one the
agent cannot use (a server URL that is no URL) exit status 4, not a traceback.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from agent.cli import main as agent_main
from agent.config import AgentConfig, ConfigError, load_config, save_config
from tests.agent.fakes import (
    CONFIG_TOKEN,
    write_config,
)


@pytest.mark.parametrize(
    "changed",
    [{"serverUrl": "http://[::1"}, {"agentToken": CONFIG_TOKEN + "\u00e9"}],
    ids=["url-bracket", "token-non-ascii"],
)
def test_a_config_the_agent_cannot_use_is_exit_4_not_a_traceback(
    tmp_path: Path, changed: dict[str, str], agent_logging: None
) -> None:
    """Was: `gua-agent push-once` with a config whose serverUrl is `http://[::1` raised
    ValueError("Invalid IPv6 URL") out of urlsplit in normalize_server_url, and one whose
    agentToken holds a non-ASCII letter raised UnicodeEncodeError ("'ascii' codec can't
    encode character '\\xe9' in position 32") building the httpx client: a traceback and
    exit 1, which systemd's Restart=on-failure restarts forever (only 3 and 4 stop it).
    `gua-agent enroll --server-url http://[::1` is the same traceback. docs/agent.md: a
    missing or invalid config is exit 4 with a sentence."""
    config = write_config(tmp_path / "config.json", **changed)
    argv = ["push-once", "--fake", "--config", str(config), "--retry-budget", "1s"]
    assert agent_main([*argv, "--spool-dir", str(tmp_path / "spool")]) == 4


TOKEN = "gua_agent_hunt0001_s3cr3t-never-elsewhere"


def _config() -> AgentConfig:
    return AgentConfig("https://board.example", "h-1", "node", TOKEN, "gua_agent_hunt0001")


def test_the_config_is_written_0600_in_a_0700_directory(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "config.json"
    save_config(path, _config())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_config(path).agent_token == TOKEN


def test_a_symlinked_config_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    os.chmod(victim, 0o644)
    path = tmp_path / "config.json"
    path.symlink_to(victim)
    save_config(path, _config(), force=True)
    assert victim.read_text() == "keep me"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert not path.is_symlink()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\xfe garbage",
        b"[1, 2]",
        b'{"agentToken": "' + TOKEN.encode() + b'", "serverUrl": 5',
        json.dumps({**json.loads(_config().to_json()), "agentToken": 5}).encode(),
        json.dumps({**json.loads(_config().to_json()), "serverUrl": "file:///etc"}).encode(),
    ],
)
def test_a_corrupt_config_is_a_config_error_without_the_token(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(raw)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert TOKEN not in str(caught.value)


def test_the_cluster_is_optional_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    save_config(path, _config())
    assert "cluster" not in json.loads(path.read_text())
    assert load_config(path).cluster is None

    again = tmp_path / "again.json"
    save_config(again, AgentConfig("https://b.example", "h", "n", TOKEN, "p", cluster="lab"))
    assert json.loads(again.read_text())["cluster"] == "lab"
    assert load_config(again).cluster == "lab"


@pytest.mark.parametrize("cluster", ["", "two words", "x" * 65, 7, "a\nb"])
def test_a_bad_cluster_is_a_config_error(tmp_path: Path, cluster: object) -> None:
    path = write_config(tmp_path / "config.json")
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "cluster": cluster}))
    with pytest.raises(ConfigError, match="cluster") as caught:
        load_config(path)
    assert CONFIG_TOKEN not in str(caught.value)
