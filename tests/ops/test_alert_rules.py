"""The alert rules under promtool (Debian package prometheus): they load, and their unit
tests in docs/observability/alerts_test.yml pass; and the notice counters they read
exist, at 0, from the start of a board process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from board.metrics.registry import NOTICE_CHANNELS

REPO = Path(__file__).resolve().parents[2]
OBSERVABILITY = REPO / "docs" / "observability"
DEADLINE_S = 120  # generous: the machine is shared


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not found: apt-get install -y prometheus (Debian package)")
    return found


def run(*argv: str) -> str:
    done = subprocess.run(
        argv, cwd=OBSERVABILITY, capture_output=True, text=True, timeout=DEADLINE_S, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_alert_rules_load_and_pass_their_unit_tests() -> None:
    tool = promtool()
    assert "SUCCESS" in run(tool, "check", "rules", "alerts.yml")
    assert "SUCCESS" in run(tool, "test", "rules", "alerts_test.yml")


def test_a_fresh_board_exports_the_notice_counters_at_zero() -> None:
    """Before any notice is sent, /metrics already has every channel's series at 0."""
    env = {k: v for k, v in os.environ.items() if k.lower() != "prometheus_multiproc_dir"}
    env["PYTHONPATH"] = str(REPO)
    code = (
        "import sys, board.app\n"
        "from board.metrics.exposition import render\n"
        "sys.stdout.write(render().decode())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    samples = dict(
        line.rsplit(" ", 1) for line in done.stdout.splitlines() if not line.startswith("#")
    )
    for name in ("gua_board_notices_delivered_total", "gua_board_notices_failed_total"):
        for channel in NOTICE_CHANNELS:
            key = f'{name}{{channel="{channel}"}}'
            assert samples.get(key) == "0.0", (key, done.stdout)
