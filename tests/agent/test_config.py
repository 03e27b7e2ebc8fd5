"""The agent's config file: written 0600 in a 0700 directory, a symlink replaced rather
than followed, a corrupt one a config error that never shows the token, and one the
agent cannot use (a server URL that is no URL) exit status 4, not a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli import main as agent_main
from tests.agent.fakes import CONFIG_TOKEN, write_config


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
