"""Energy on the pages (in-process): the fleet's watts now, kWh today and its idle-held
share, said to be partial when a GPU reports no power; each person's kWh this week."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.board.builders import Tenant, enroll
from tests.board.test_reports_builders import gpu, proc
from tests.web.helpers import observe, signed_in


def midday_zone(now: datetime) -> str:
    """A fixed-offset zone where it is around noon now: the test's 200 s never cross a
    local midnight, whatever time the suite runs."""
    offset = 12 - now.hour  # local = UTC + offset
    if offset == 0:
        return "Etc/UTC"
    return f"Etc/GMT{'-' if offset > 0 else '+'}{abs(offset)}"  # POSIX signs are inverted


async def lab(app: Any, client: httpx.AsyncClient, slug: str) -> Tenant:
    """GPU 0 idle-held by bob at 900 W, GPU 1 busy for alice at 720 W, GPU 2 busy for
    carol and reporting no power: three observations 100 s apart (within the 120 s gap), ending now.

    Energy: GPU 0 900 W × 200 s = 0.05 kWh (idle-held), GPU 1 720 W × 200 s = 0.04 kWh,
    GPU 2 none: 0.09 kWh, 56 % idle-held, over 400 of the 600 observed GPU-seconds."""
    tenant = await signed_in(app, client, slug)
    now = datetime.now(UTC)
    r = await client.patch(
        f"/api/v1/workspaces/{slug}/settings",
        json={"timezone": midday_zone(now)},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    host = await enroll(client, tenant, "node-e")
    for seconds in (200, 100, 0):
        await observe(
            client,
            host["agentToken"],
            now - timedelta(seconds=seconds),
            [
                gpu(0, state="idle_held", procs=[proc("bob")], power=900),
                gpu(1, util=90, state="active", procs=[proc("alice")], power=720),
                gpu(2, util=50, state="active", procs=[proc("carol")], power=None),
            ],
        )
    return tenant


async def test_the_fleet_page_shows_watts_kwh_today_and_the_idle_held_share(app, client) -> None:
    await lab(app, client, "watts")
    text = (await client.get("/w/watts/")).text
    assert '<span class="n" data-energy-watts>1,620 W</span>' in text
    assert "(1 GPU reports no power)" in text
    assert "data-energy-today>0.09 kWh</span>" in text
    assert "data-energy-partial>partial</strong>" in text
    assert "power known for 0.1 of 0.2 GPU-hours" in text
    assert "data-energy-idle-share>56 %</span>" in text
    assert "idle-held (0.05 kWh)" in text
    # The refresh draws the same fragment.
    body = (await client.get("/w/watts/fleet.json")).json()
    assert "data-energy-today>0.09 kWh</span>" in body["fragments"]["hosts"]


async def test_the_people_view_shows_each_persons_kwh_this_week(app, client) -> None:
    await lab(app, client, "peoplekwh")
    text = (await client.get("/w/peoplekwh/people")).text
    bob = text[text.index('data-user="bob"') :]
    bob = bob[: bob.index("</tr>")]
    assert "data-energy>0.05 kWh</td>" in bob
    assert '<span class="sr-only">bob: </span>0.05 kWh<span' in bob
    alice = text[text.index('data-user="alice"') :]
    alice = alice[: alice.index("</tr>")]
    assert "data-energy>0.04 kWh</td>" in alice
    assert 'data-idle-energy><span class="sr-only">alice: </span>0.00 kWh' in alice
    carol = text[text.index('data-user="carol"') :]
    carol = carol[: carol.index("</tr>")]
    assert 'data-energy>0.00 kWh <span class="muted small">(partial)</span></td>' in carol


async def test_the_usage_page_charts_kwh_per_day_with_a_table(app, client) -> None:
    await lab(app, client, "kwhdays")
    text = (await client.get("/w/kwhdays/usage?groupBy=user")).text
    assert 'id="energy-title">kWh per day' in text
    assert "partial: some GPUs reported no power" in text
    table = text[
        text.index('id="energy-days"') : text.index("</table>", text.index('id="energy-days"'))
    ]
    rows = table.split("<tr data-day=")[1:]
    assert len(rows) >= 2  # every day of the window, the empty ones too
    today = rows[-1]
    assert (
        '<td class="num">0.09 kWh <span class="muted small">(partial)</span></td>'
        '<td class="num">0.05 kWh</td>'
    ) in today
    assert '<td class="num">0.00 kWh</td><td class="num">0.00 kWh</td>' in rows[0]
    # The chart: today's column is the rest (0.04 kWh) below the idle-held 0.05 kWh.
    assert "0.09 kWh, 0.05 kWh idle-held</title>" in text
