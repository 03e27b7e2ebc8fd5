"""One workspace cannot hold up another's notices: a receiver that accepts the connection
and never answers holds only its own workspace's share of the delivery slots, so another
workspace's notice is delivered while those sends still hang."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from board.notices.outbox import PER_WORKSPACE
from board.notices.service import TESTS_PER_CHANNEL
from board.settings import Settings
from tests.board.builders import make_tenant
from tests.board.db import rows
from tests.notices.conftest import notice_settings
from tests.notices.helpers import add_channel, notices_of, wait_for
from tests.notices.receivers import HttpReceiver, SilentReceiver, SmtpReceiver


@pytest.fixture
def settings(database_url: str, tmp_path: Path, smtp: SmtpReceiver) -> Settings:
    # A deadline far past the test's own waits: a hanging send never ends on its own here.
    return notice_settings(
        database_url,
        tmp_path / "data",
        smtp.url,
        notices_timeout_seconds=120.0,
        notices_poll_seconds=0.2,
    )


async def _of(app: Any, slug: str) -> list[tuple[Any, ...]]:
    return await rows(
        app,
        "SELECT d.status, d.attempts, d.response FROM notice_deliveries d "
        "JOIN workspaces w ON w.id = d.workspace_id WHERE w.slug = %s ORDER BY d.id",
        slug,
    )


async def test_a_receiver_that_never_answers_delays_no_other_workspace(
    app, client, hook: HttpReceiver
) -> None:
    silent = SilentReceiver().start()
    notices = notices_of(app)
    try:
        slow = await make_tenant(app, "slow")
        fine = await make_tenant(app, "fine")
        for _ in range(2):  # more test notices than the workspace's share of the slots
            channel = await add_channel(client, slow, kind="webhook", url=silent.url)
            for _ in range(TESTS_PER_CHANNEL):
                r = await client.post(
                    f"/api/v1/workspaces/slow/notification-channels/{channel['channelId']}/test",
                    headers=slow.auth(),
                )
                assert r.status_code == 202, r.text
        theirs = await add_channel(client, fine, kind="webhook", url=hook.url)
        hook.secret = theirs["secret"]
        notices.start()

        async def slow_hanging() -> bool:
            return silent.open >= PER_WORKSPACE

        await wait_for(app, slow_hanging, "the slow workspace's sends to hang")
        r = await client.post(
            f"/api/v1/workspaces/fine/notification-channels/{theirs['channelId']}/test",
            headers=fine.auth(),
        )
        assert r.status_code == 202, r.text

        async def fine_delivered() -> bool:
            return [row[0] for row in await _of(app, "fine")] == ["delivered"]

        await wait_for(app, fine_delivered, "the other workspace's notice")
        assert hook.delivered()[0].verified
        # Still hanging: none of the slow workspace's sends has ended, and it holds only
        # its share of the slots; the rest of its notices wait their turn, untried.
        slow_rows = await _of(app, "slow")
        assert (
            sorted(row[0] for row in slow_rows)
            == ["pending"] * (len(slow_rows) - PER_WORKSPACE) + ["sending"] * PER_WORKSPACE
        )
        assert all(row[2] is None for row in slow_rows)
        assert silent.open == silent.most_open == PER_WORKSPACE
    finally:
        await notices.stop()
        silent.stop()


async def test_a_claim_takes_every_workspace_first_before_anyone_second(app, client) -> None:
    from board.notices import outbox

    busy = await make_tenant(app, "busy")
    quiet = await make_tenant(app, "quiet")
    mine = await add_channel(client, busy, kind="email", emails=["ops@busy.example"])
    for _ in range(TESTS_PER_CHANNEL):
        r = await client.post(
            f"/api/v1/workspaces/busy/notification-channels/{mine['channelId']}/test",
            headers=busy.auth(),
        )
        assert r.status_code == 202, r.text
    theirs = await add_channel(client, quiet, kind="email", emails=["ops@quiet.example"])
    r = await client.post(
        f"/api/v1/workspaces/quiet/notification-channels/{theirs['channelId']}/test",
        headers=quiet.auth(),
    )
    assert r.status_code == 202, r.text
    async with app.state.runtime.pool.connection() as conn:
        await conn.set_autocommit(True)
        first = await outbox.claim(conn, 2, 60.0)  # the quiet one is the newest of six
        rest = await outbox.claim(conn, 10, 60.0)
        await conn.set_autocommit(False)
    ids = await rows(app, "SELECT id, slug FROM workspaces")
    slug = dict(ids)
    assert sorted(slug[d.workspace_id] for d in first) == ["busy", "quiet"]
    # The busy workspace has its share in flight now: one more of its five, not three.
    assert [slug[d.workspace_id] for d in rest] == ["busy"] * (PER_WORKSPACE - 1)
