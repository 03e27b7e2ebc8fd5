"""The shipped nginx example (deploy/nginx/gua-board.conf), run for real in front of a
served board: https reaches the board with X-Forwarded-Proto, the session cookie is
Secure, plain http is redirected, WebSocket upgrades pass, /metrics stays inside."""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.ops.fleet import make_fleet
from tests.support.live import LiveBoard, start_board, stop_board, wait_for
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "nginx" / "gua-board.conf"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')

pytestmark = pytest.mark.skipif(
    not Path(NGINX).exists(), reason="nginx is not installed (.ci/run installs nginx-light)"
)


@dataclass
class Proxy:
    https: str
    http: str
    cert: Path


def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "board.pem", folder / "board.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
        + ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


def site_config(board_port: int, http_port: int, https_port: int, cert: Path, key: Path) -> str:
    """The example as shipped, with only its addresses, name and certificate swapped."""
    text = EXAMPLE.read_text()
    swaps = {
        "listen 80;": f"listen 127.0.0.1:{http_port};",
        "listen 443 ssl http2;": f"listen 127.0.0.1:{https_port} ssl http2;",
        "server 127.0.0.1:8000;": f"server 127.0.0.1:{board_port};",
        "/etc/ssl/certs/board.example.com.pem": str(cert),
        "/etc/ssl/private/board.example.com.key": str(key),
        "board.example.com": "localhost",
    }
    for old, new in swaps.items():
        assert old in text, f"the example no longer has {old!r}"
        text = text.replace(old, new)
    return text


@pytest.fixture
def proxied(database_url: str, tmp_path: Path) -> Iterator[tuple[LiveBoard, Proxy]]:
    board = start_board(database_url, tmp_path / "board", {"GUA_BOARD_ACCESS_LOG": "true"})
    folder = tmp_path / "nginx"
    folder.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(folder, 0o755)
    cert, key = self_signed(folder)
    http_port, https_port = free_port(), free_port()
    (folder / "site.conf").write_text(site_config(board.port, http_port, https_port, cert, key))
    user = "user root;\n" if os.geteuid() == 0 else ""
    (folder / "nginx.conf").write_text(
        f"{user}daemon off;\nworker_processes 1;\npid {folder}/nginx.pid;\n"
        f"error_log {folder}/error.log info;\nevents {{ worker_connections 64; }}\n"
        "http {\n"
        f"  access_log {folder}/access.log;\n"
        f"  client_body_temp_path {folder}/body;\n  proxy_temp_path {folder}/proxy;\n"
        f"  include {folder}/site.conf;\n"
        "}\n"
    )
    nginx = subprocess.Popen(
        [NGINX, "-p", str(folder), "-c", str(folder / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    proxy = Proxy(f"https://localhost:{https_port}", f"http://127.0.0.1:{http_port}", cert)

    def up() -> bool:
        assert nginx.poll() is None, (folder / "error.log").read_text()[-2000:]
        try:
            httpx.get(f"{proxy.http}/", timeout=2, trust_env=False)
            return True
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, "nginx to listen")
        yield board, proxy
    finally:
        nginx.terminate()
        nginx.wait(30)
        stop_board(board)


def test_https_reaches_the_board_and_the_cookie_is_secure(
    proxied: tuple[LiveBoard, Proxy],
) -> None:
    board, proxy = proxied
    fleet = make_fleet(board, "acme")
    tls = ssl.create_default_context(cafile=str(proxy.cert))
    with httpx.Client(base_url=proxy.https, verify=tls, trust_env=False, timeout=30) as c:
        form = c.get("/signin")
        assert form.status_code == 200
        assert re.fullmatch(r"[0-9a-f]{32}", form.headers["x-request-id"])  # nginx's $request_id
        found = _CSRF.search(form.text)
        assert found
        signed = c.post(
            "/signin",
            data={
                "csrf_token": found.group(1),
                "email": fleet.email,
                "password": fleet.password,
                "next": "/",
            },
        )
        assert signed.status_code == 303, signed.text[:500]
        cookie = next(
            v for k, v in signed.headers.multi_items() if k == "set-cookie" and "gua_session=" in v
        )
        assert "secure" in cookie.lower()
        assert signed.headers["location"].startswith(("/", "https://"))
        assert c.get("/account").status_code == 200
        # /metrics stays inside; the API answers through the proxy.
        assert c.get("/metrics").status_code == 404
        assert c.get("/healthz").json() == {"status": "ok"}
    # The same sign-in form straight over http is not marked Secure: it was the proxy's
    # X-Forwarded-Proto that did it.
    with board.client() as direct:
        plain = direct.get("/signin")
        assert "secure" not in plain.headers.get("set-cookie", "").lower()
    # Plain http at the proxy is sent to https.
    with httpx.Client(trust_env=False, timeout=30) as c:
        moved = c.get(f"{proxy.http}/w/acme")
    assert moved.status_code == 301
    assert moved.headers["location"] == "https://127.0.0.1/w/acme"


async def test_agent_websockets_pass_through(proxied: tuple[LiveBoard, Proxy]) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    board, proxy = proxied
    tls = ssl.create_default_context(cafile=str(proxy.cert))
    url = proxy.https.replace("https://", "wss://") + "/agent/v1/stream"
    # A bad token is refused by the board itself (401), through the proxy's upgrade.
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, ssl=tls, additional_headers={"Authorization": "Bearer nope"}):
            pass
    assert refused.value.response.status_code == 401
