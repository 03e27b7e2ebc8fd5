"""A board killed mid-delivery: the receiver holds the first request while the board is
killed with SIGKILL; a board started again sends it once more with the same webhook-id,
and once that is recorded as delivered it is never sent again (at least once, with a
stable id a receiver can drop repeats by)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.board.builders import make_tenant
from tests.board.db import rows
from tests.notices.conftest import SECRET_KEY
from tests.notices.helpers import add_channel
from tests.notices.receivers import HttpReceiver, Received, wait_until
from tests.support.live import start_board


def _serve(database_url: str, data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`gua-board serve` with the notices' secret key and quick delivery settings."""
    board = start_board(
        database_url,
        data_dir,
        {
            "GUA_BOARD_ALLOW_INSECURE_WEBHOOKS": "true",
            "GUA_BOARD_NOTICES_POLL_SECONDS": "0.2",
            "GUA_BOARD_NOTICES_TIMEOUT_SECONDS": "2",
            "GUA_BOARD_NOTICES_LEASE_SECONDS": "8",
            "GUA_BOARD_NOTICES_RETRY_BASE_SECONDS": "0.2",
        },
        secret_key=SECRET_KEY,
    )
    return board.process, board.url


async def test_killed_mid_delivery_is_delivered_once_after_restart(
    app: Any, client: Any, database_url: str, tmp_path: Path
) -> None:
    # The first request is held (no answer) until the test ends; later ones answered.
    receiver = HttpReceiver(hold=lambda seen: 300.0 if len(receiver_calls()) == 1 else 0.0)

    def receiver_calls() -> list[Received]:
        return receiver.received

    receiver.start()
    first = second = None
    try:
        acme = await make_tenant(app, "acme")
        channel = await add_channel(client, acme, kind="webhook", url=receiver.url)
        receiver.secret = channel["secret"]
        queued = await client.post(
            f"/api/v1/workspaces/acme/notification-channels/{channel['channelId']}/test",
            headers=acme.auth(),
        )
        assert queued.status_code == 202

        first, _ = _serve(database_url, tmp_path / "data")
        wait_until(lambda: len(receiver.received) == 1, "the first attempt to arrive")
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        assert (await rows(app, "SELECT status FROM notice_deliveries")) == [("sending",)]

        second, _ = _serve(database_url, tmp_path / "data")

        def delivered() -> bool:
            return len(receiver.delivered()) == 1

        wait_until(delivered, "delivery after the restart (once the claim's lease expired)", 120)
        found = await _wait_recorded(app)
        assert found == [("delivered", 2)]
        time.sleep(3)  # several more polls of the restarted board: nothing is sent again
        ids = [r.event_id for r in receiver.received]
        assert ids == [queued.json()["eventId"]] * 2
        assert len(receiver.delivered()) == 1
        assert all(r.verified for r in receiver.received)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(30)
        receiver.stop()


async def _wait_recorded(app: Any) -> list[tuple[Any, ...]]:
    import asyncio

    for _ in range(600):
        found = await rows(app, "SELECT status, attempts FROM notice_deliveries")
        if found and found[0][0] == "delivered":
            return found
        await asyncio.sleep(0.1)
    raise AssertionError("the delivery was never recorded as delivered")
