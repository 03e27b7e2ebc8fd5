"""The released `gua` agent of gpu-usage-audit, installed once in a cached venv, for the
interop tests; the board they run against is the `live_board` of tests/conftest.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("GUA_TEST_CACHE", REPO / "tests" / ".cache"))
BIN = Path(sys.executable).parent


def _python312() -> str | None:
    for candidate in (
        os.environ.get("GUA_TEST_PYTHON312"),
        shutil.which("python3.12"),
        "/root/.pyenv/versions/3.12.1/bin/python3.12",
    ):
        if candidate and Path(candidate).exists():
            probe = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
                capture_output=True,
                text=True,
            )
            if probe.returncode == 0 and probe.stdout.strip() == "True":
                return candidate
    return None


@pytest.fixture(scope="session")
def gua_agent() -> Callable[[str], Path]:
    """Path to the `gua` executable of a released gpu-usage-audit version (cached venv)."""

    def install(version: str) -> Path:
        python = _python312()
        if python is None:
            pytest.skip("the released gua agent needs Python 3.12, and none was found here")
        venv = CACHE / f"gua-{version}"
        gua = venv / "bin" / "gua"
        if not gua.exists():
            subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
            done = subprocess.run(
                [str(venv / "bin" / "pip"), "install", "-q", f"gpu-usage-audit=={version}"],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                pytest.skip(f"could not install gpu-usage-audit {version}: {done.stderr[-500:]}")
        return gua

    return install
