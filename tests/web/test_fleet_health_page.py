"""Fleet health and "Find GPUs" over plain HTTP (in-process): the fleet page's counts,
missing and hot GPUs and maintenance badges (also in its refresh), retiring a GPU from
the page, the results page and its "Book these" link into a filled booking form."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.board.builders import Tenant, enroll
from tests.board.test_reports_builders import gpu
from tests.web.helpers import PASSWORD, browser, csrf_of, observe, sign_in, signed_in


def card(index: int, temperature: int = 40) -> dict[str, Any]:
    body = gpu(index, used=1000, total=81920)
    body["temperatureC"] = temperature
    return body


async def lab(app: Any, client: httpx.AsyncClient) -> tuple[Tenant, str]:
    """node-h: GPU-1 gone for 3 minutes, GPU-2 at 92 °C, GPU-0 and GPU-3 fine and free;
    node-m: in a maintenance window now."""
    tenant = await signed_in(app, client, "health")
    host = await enroll(client, tenant, "node-h")
    now = datetime.now(UTC)
    await observe(
        client, host["agentToken"], now - timedelta(minutes=4), [card(i) for i in range(4)]
    )
    for minutes in (3, 2, 1, 0):
        at = now - timedelta(minutes=minutes, seconds=2)
        await observe(client, host["agentToken"], at, [card(0), card(2, 92), card(3)])
    other = await enroll(client, tenant, "node-m")
    await observe(client, other["agentToken"], now - timedelta(seconds=5), [card(0)])
    r = await client.post(
        f"/api/v1/workspaces/health/hosts/{other['hostId']}/maintenance",
        json={
            "start": (now - timedelta(hours=1)).isoformat(),
            "end": (now + timedelta(hours=2)).isoformat(),
            "note": "new PSU",
        },
        headers=tenant.auth(),
    )
    assert r.status_code == 201, r.text
    return tenant, str(host["hostId"])


async def test_the_fleet_page_shows_health(app, client) -> None:
    _, host_id = await lab(app, client)
    page = await client.get("/w/health/")
    assert page.status_code == 200
    text = page.text
    assert '<span data-health="ok">3 ok</span>' in text  # node-h GPU 0, 3; node-m GPU 0
    assert ">1 missing</span>" in text
    assert ">1 hot</span>" in text
    missing = re.search(rf'<li data-missing="{host_id}/GPU-1">(.*?)</li>', text, re.S)
    assert missing, text
    assert "node-h GPU 1" in missing.group(1)
    assert "not reported since" in missing.group(1)
    assert "Retire" in missing.group(1)
    assert f'data-hot="{host_id}/2"' in text
    assert "data-hot-card" in text
    assert 'data-host-missing="1"' in text
    assert "In maintenance" in text
    assert "new PSU" in text
    assert 'action="/w/health/find-gpus"' in text
    # The refresh carries them too, and a change of health changes its ETag.
    refreshed = await client.get("/w/health/fleet.json")
    assert ">1 missing</span>" in refreshed.json()["fragments"]["counts"]
    etag = refreshed.headers["etag"]
    assert (
        await client.get("/w/health/fleet.json", headers={"If-None-Match": etag})
    ).status_code == 304

    # Retire from the page: CSRF-checked, admins only, audited; then it is off the list.
    form = f"/w/health/hosts/{host_id}/gpus/GPU-1/retire"
    assert (await client.post(form, data={})).status_code == 403
    async with browser(app) as member:
        await sign_in(member, "member@health.example", PASSWORD)
        fleet = await member.get("/w/health/")
        assert "Retire" not in fleet.text
        r = await member.post(form, data={"csrf_token": csrf_of(fleet.text)})
        assert r.status_code == 403
    r = await client.post(form, data={"csrf_token": csrf_of(text)})
    assert r.status_code == 303, r.text
    after = await client.get("/w/health/")
    assert ">0 missing</span>" in after.text
    assert "data-missing=" not in after.text
    assert (
        await client.get("/w/health/fleet.json", headers={"If-None-Match": etag})
    ).status_code == 200
    refused = await client.post(
        f"/w/health/hosts/{host_id}/gpus/GPU-0/retire", data={"csrf_token": csrf_of(text)}
    )
    assert refused.status_code == 409
    assert "newest observation" in refused.text


async def test_find_gpus_and_book_these(app, client) -> None:
    _, host_id = await lab(app, client)
    page = await client.get("/w/health/find-gpus", params={"gpus": "2", "minFreeMemoryGib": "70"})
    assert page.status_code == 200, page.text
    text = page.text
    # node-h's free GPUs 0, 2 and 3 (hot does not mean busy); node-m is in maintenance.
    assert f'data-candidate="{host_id}"' in text
    assert "node-m" not in text.split('id="results-title"')[1]
    link = re.search(r'<a class="button primary" href="([^"]+)"[^>]*>Book these</a>', text)
    assert link, text
    query = parse_qs(urlsplit(html.unescape(link.group(1))).query)
    assert query["host"] == [host_id]
    assert query["gpus"] == ["GPU-0", "GPU-2"]
    booking = await client.get(html.unescape(link.group(1)))
    assert booking.status_code == 200
    for uuid in ("GPU-0", "GPU-2"):
        assert re.search(rf'value="{uuid}" checked', booking.text), uuid
    assert 'value="GPU-3" checked' not in booking.text
    assert f'value="{query["start"][0]}"' in booking.text
    assert f'value="{query["end"][0]}"' in booking.text

    # A range ahead, in the workspace's zone (the browser's date-and-time field).
    day = (datetime.now(UTC) + timedelta(days=2)).date().isoformat()
    ahead = await client.get(
        "/w/health/find-gpus",
        params={"gpus": "4", "sameHost": "false", "from": f"{day}T09:00", "to": f"{day}T17:00"},
    )
    assert ahead.status_code == 200
    # node-m's window is over by then: node-h's three listed GPUs and node-m's one.
    assert "4 GPUs on 2 hosts: this selection" in ahead.text
    # Refusals are the page again, with the sentence and the 422.
    for params, words in (
        ({"gpus": "0"}, "gpus must be a whole number"),
        ({"gpus": "2", "minFreeMemoryGib": "lots"}, "Free memory is a number of GiB"),
        ({"from": f"{day}T09:00", "to": f"{day}T08:00"}, "must be after from"),
    ):
        r = await client.get("/w/health/find-gpus", params=params)
        assert r.status_code == 422
        assert words in html.unescape(r.text), r.text
        assert 'id="find-error"' in r.text
