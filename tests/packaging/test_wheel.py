"""The built wheel is complete: installed into a fresh venv, away from the checkout, it migrates
an empty database, issues a token, serves, enrolls a host and accepts its observation.

The wheel is built from a copy of the sources (what an sdist holds), not in the checkout:
an in-tree build leaves `build/`, whose stale files would end up in the next wheel, and
several test runs at once would share it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.board.builders import example, retimed
from tests.support.databases import empty_database
from tests.support.live import clean_env
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]
# What the build needs; the packaged folders' files are checked one by one below.
SOURCES = ("pyproject.toml", "README.md", "board", "agent", "migrations")
# Minutes: a first run downloads the board's dependencies into pip's cache.
pytestmark = pytest.mark.timeout(900)


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{argv[:3]} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def _shipped_files(folder: Path) -> list[Path]:
    """Files under `folder` a wheel should carry: no caches, no dotfiles."""
    return [
        path
        for path in sorted(folder.rglob("*"))
        if path.is_file()
        and "__pycache__" not in path.parts
        and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    ]


def _expected_wheel_names() -> set[str]:
    names = {
        f"{package}/{path.relative_to(REPO / package).as_posix()}"
        for package in ("board", "agent")
        for path in _shipped_files(REPO / package)
    }
    names |= {
        f"board/_migrations/{path.relative_to(REPO / 'migrations').as_posix()}"
        for path in _shipped_files(REPO / "migrations")
    }
    return names


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("wheel-source")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(
                REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)], out
    )
    (built,) = out.glob("gua_board-*.whl")
    return built


@pytest.fixture(scope="session")
def wheel_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout with `<wheel>[board]` and its dependencies from PyPI."""
    venv = tmp_path_factory.mktemp("wheel-venv")
    assert not venv.resolve().is_relative_to(REPO)
    _run([sys.executable, "-m", "venv", "--clear", str(venv)], venv)
    _run([str(venv / "bin" / "pip"), "install", "-q", "--no-compile", f"{wheel}[board]"], venv)
    return venv


@pytest.fixture
def empty_database_url(pg_admin_url: str, worker_tag: str) -> Iterator[str]:
    """A database with no schema at all: the wheel's own migrations must build it."""
    with empty_database(pg_admin_url, f"gua_wheel_{worker_tag}") as url:
        yield url


def test_wheel_carries_every_module_template_static_file_and_migration(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = {n for n in archive.namelist() if ".dist-info/" not in n}
    expected = _expected_wheel_names()
    # Missing: a new package or data folder not yet listed in pyproject's [tool.setuptools].
    assert sorted(expected - names) == []
    assert sorted(names - expected) == []
    for required in (
        "board/_migrations/env.py",
        "board/_migrations/script.py.mako",
        "board/web/templates/base.html",
        "board/web/static/board.css",
        "board/py.typed",
        "agent/py.typed",
        "agent/gua-agent.service",
    ):
        assert required in names
    assert any(n.startswith("board/_migrations/versions/") for n in names)


def test_installed_wheel_migrates_serves_and_accepts_an_observation(
    wheel_venv: Path, empty_database_url: str, tmp_path: Path
) -> None:
    bin_dir = wheel_venv / "bin"
    workdir = tmp_path / "elsewhere"  # cwd outside the checkout: nothing imports from it
    workdir.mkdir()
    env = clean_env(
        {
            "GUA_BOARD_DATABASE_URL": empty_database_url,
            "GUA_BOARD_DATA_DIR": str(tmp_path / "data"),
        }
    )
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)

    located = json.loads(
        _run(
            [
                str(bin_dir / "python"),
                "-c",
                "import json, board, agent; from board.db.migrate import migrations_dir; "
                "print(json.dumps([board.__file__, agent.__file__, str(migrations_dir())]))",
            ],
            workdir,
            env,
        )
    )
    for path in located:
        assert Path(path).resolve().is_relative_to(wheel_venv.resolve()), located
        assert not Path(path).resolve().is_relative_to(REPO), located

    def gua_board(*args: str) -> str:
        return _run([str(bin_dir / "gua-board"), *args], workdir, env)

    assert "migrations applied" in gua_board("migrate")
    gua_board("create-workspace", "wheel")
    issued = json.loads(gua_board("issue-token", "--workspace", "wheel", "--json"))

    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [str(bin_dir / "gua-board"), "serve", "--port", str(port)],
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, trust_env=False, timeout=30) as http:
            _wait_until_healthy(http, server, log_path)
            claimed = http.post(
                "/agent/v1/enrollments/claim",
                json={"enrollmentToken": issued["enrollmentToken"], "hostname": "wheel-host"},
            )
            assert claimed.status_code == 201, claimed.text
            body = retimed(example("observation-1.8.0-fake.json"))
            pushed = http.post(
                "/agent/v1/observations",
                content=json.dumps(body),
                headers={
                    "Authorization": f"Bearer {claimed.json()['agentToken']}",
                    "Content-Type": "application/json",
                },
            )
            assert pushed.status_code == 202, pushed.text
            # The pages' templates and static files come from the installed package too.
            assert http.get("/signin").status_code == 200
            assert http.get("/static/board.css").status_code == 200
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)
    assert "Traceback" not in log_path.read_text(errors="replace")


def _wait_until_healthy(
    http: httpx.Client, server: subprocess.Popen[bytes], log_path: Path
) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"gua-board serve exited: {log_path.read_text()[-3000:]}")
        try:
            if http.get("/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(f"gua-board serve never answered /healthz: {log_path.read_text()[-3000:]}")
