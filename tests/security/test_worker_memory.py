"""A worker's memory stays bounded whatever a client sends: compressed WebSocket frames
of the agent's stream (from a host or a stranger) and archive uploads of 100 MiB, gzip or
not, grow no worker by more than a few tens of MiB.

Against a served board of its own (`gua-board serve --workers 2`) whose workers give large
buffers back when they are freed (glibc otherwise keeps them after the first one, and a
worker that an earlier check grew would hide the next check's growth).
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import time
import zlib
from collections.abc import Iterator

import httpx
import pytest

from tests.security.conftest import SETTINGS
from tests.security.seed import enroll, unique, yesterday
from tests.security.seed import make_tenant as make_live_tenant
from tests.support.live import LiveBoard, measure_peaks, start_board, stop_board


@pytest.fixture(scope="module")
def lean_board(
    security_database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveBoard]:
    """A board of its own for the memory checks, whose workers give large buffers back
    when they are freed (glibc otherwise keeps them after the first one, and a worker
    that an earlier check grew would hide the next check's growth)."""
    settings = {**SETTINGS, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
    served = start_board(
        security_database_url, tmp_path_factory.mktemp("lean"), settings, workers=2
    )
    try:
        yield served
    finally:
        stop_board(served)


STREAM_PEAK_MIB = 64


# One message just under uvicorn's default ws_max_size (16 MiB): about 16 KiB deflated.
INFLATED = b"x" * (16 * 1024 * 1024 - 100)
DEFLATE_OFFER = "permessage-deflate; client_no_context_takeover; client_max_window_bits=12"


def _deflated(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -12)
    out = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]


def _masked_text_frame(payload: bytes, compressed: bool) -> bytes:
    first = 0x81 | (0x40 if compressed else 0)  # FIN, text; RSV1 = compressed
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", first, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", first, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", first, 0x80 | 127, n)
    mask = b"\x01\x02\x03\x04"
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + body


def _upgrade(board: LiveBoard, token: str) -> socket.socket:
    """A raw WebSocket upgrade of /agent/v1/stream that offers permessage-deflate."""
    sock = socket.create_connection(("127.0.0.1", board.port), timeout=30)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /agent/v1/stream HTTP/1.1\r\nHost: 127.0.0.1:{board.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Authorization: Bearer {token}\r\n"
            f"Sec-WebSocket-Extensions: {DEFLATE_OFFER}\r\n\r\n"
        ).encode()
    )
    return sock


def _drain(sock: socket.socket, seconds: float) -> bytes:
    sock.settimeout(0.5)
    got = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    return got


def test_compressed_stream_frames_stay_within_the_message_limit(lean_board: LiveBoard) -> None:
    """Was: 20 deflated frames (326 KB sent) grew a worker by ~380 MiB, 100 of them took
    1.6 s of its CPU, and the socket stayed open."""
    board = lean_board
    tenant = make_live_tenant(board, "inflate")
    host = enroll(board, tenant, unique("inflater"))
    frame = _masked_text_frame(_deflated(INFLATED), compressed=True)
    sock = _upgrade(board, host.token)
    try:
        with measure_peaks(board) as peaks:
            answer = _drain(sock, 2)
            assert answer.startswith(b"HTTP/1.1 101"), answer[:200]
            try:
                sock.sendall(frame * 20)
            except OSError:
                pass  # closed on us: what a frame beyond the limit deserves
            _drain(sock, 4)
    finally:
        sock.close()
    assert peaks.worst_mib < STREAM_PEAK_MIB, (
        f"20 frames of {len(frame)} bytes grew a worker by {peaks.worst_mib:.0f} MiB"
    )


def test_compressed_frames_before_a_refused_token_cost_nothing(lean_board: LiveBoard) -> None:
    """Was: with an unknown agent token of the right shape (looked up in the database,
    so the frames arrive while it is), 15 deflated frames (245 KB) grew a worker by
    ~220 MiB before the 401: anyone who can reach the board could do it."""
    board = lean_board
    frame = _masked_text_frame(_deflated(INFLATED), compressed=True)
    sock = _upgrade(board, "gua_agent_00000000_" + "A" * 43)
    try:
        with measure_peaks(board) as peaks:
            try:
                sock.sendall(frame * 15)
            except OSError:
                pass
            answer = _drain(sock, 4)
    finally:
        sock.close()
    # Refused: the 401, or (frames the handshake never allowed: compressed ones, with no
    # compression agreed) the connection closed before it.
    status_line = answer.split(b"\r\n", 1)[0]
    assert answer == b"" or b" 401 " in status_line, answer[:200]
    assert peaks.worst_mib < STREAM_PEAK_MIB, (
        f"a stranger's frames grew a worker by {peaks.worst_mib:.0f} MiB"
    )


UPLOAD_PEAK_MIB = 64


def test_an_upload_that_is_not_gzip_is_not_held_whole(lean_board: LiveBoard) -> None:
    """Was: 100 MiB of non-gzip bytes grew a worker by 200 MiB before the 400."""
    board = lean_board
    tenant = make_live_tenant(board, "upload")
    host = enroll(board, tenant, unique("uploader"))
    day = yesterday().date().isoformat()
    chunk = b"\x00not gzip" + os.urandom(1024 * 1024 - 9)

    def body() -> Iterator[bytes]:
        for _ in range(100):
            yield chunk

    with measure_peaks(board) as peaks:
        try:
            with httpx.Client(timeout=120, trust_env=False) as c:
                r = c.post(
                    f"{board.url}/agent/v1/archives?date={day}&table=gpu_sample",
                    content=body(),
                    headers={**host.auth, "Content-Type": "application/gzip"},
                )
            outcome: int | str = r.status_code
            if r.status_code < 500:
                assert isinstance(r.json()["detail"], str), r.text
        except httpx.HTTPError as exc:  # refused early and closed: fine
            outcome = type(exc).__name__
    assert outcome != 201, "bytes that are not gzip were stored"
    assert not (isinstance(outcome, int) and outcome >= 500), outcome
    assert peaks.worst_mib < UPLOAD_PEAK_MIB, (
        f"a 100 MiB upload that is not gzip grew a worker by {peaks.worst_mib:.0f} MiB"
    )


def test_a_large_upload_is_spooled_not_held(lean_board: LiveBoard) -> None:
    """An upload that starts as gzip is read to its end before it is checked: 100 MiB of
    it (gzip's magic, then bytes no reader accepts) are spooled to a file, not held."""
    board = lean_board
    tenant = make_live_tenant(board, "spool")
    host = enroll(board, tenant, unique("spooler"))
    day = yesterday().date().isoformat()
    chunk = os.urandom(1024 * 1024)

    def body() -> Iterator[bytes]:
        yield b"\x1f\x8b" + chunk[2:]
        for _ in range(99):
            yield chunk

    with measure_peaks(board) as peaks, httpx.Client(timeout=120, trust_env=False) as c:
        r = c.post(
            f"{board.url}/agent/v1/archives?date={day}&table=gpu_sample",
            content=body(),
            headers={**host.auth, "Content-Type": "application/gzip"},
        )
    assert r.status_code == 400, r.text[:300]
    assert isinstance(r.json()["detail"], str), r.text
    assert peaks.worst_mib < UPLOAD_PEAK_MIB, (
        f"a 100 MiB upload grew a worker by {peaks.worst_mib:.0f} MiB"
    )
