"""The web board in Debian's Chromium, against `gua-board demo`'s board and simulated hosts."""

from __future__ import annotations

import asyncio
import copy
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from playwright.async_api import expect
from sqlalchemy import select

from agent.fake import FakeCollector
from board.auth.models import User
from board.workspaces import service as workspaces
from tests.web.helpers import browser_sign_in, screenshots

CARD_STATES = {
    "ok": ["active", "idle_held", "idle", "active"],
    # The last card's process list is unreadable: no usageState, so utilization alone
    # decides (40-90 %: active), never "free".
    "partial": ["active", "idle_held", "idle", "active"],
    "stale": ["not_observed"] * 4,
    "error": [],
    "never": [],
}


def host_of(demo: Any, role: str) -> Any:
    return next(h for h in demo.hosts if h.role == role)


async def api_token(demo: Any, email: str) -> str:
    """A personal API token for one of the demo's people, as `gua-board create-user` gives."""
    async with demo.runtime.sessions() as session:
        workspace = await workspaces.get_workspace(session, demo.slug)
        user = await session.scalar(select(User).where(User.email == email))
        assert user is not None
        token = (await workspaces.issue_api_token(session, workspace.id, user.id)).secret
        await session.commit()
    return token


async def card_states(page: Any, host_id: str) -> list[str]:
    cards = page.locator(f'section.host[data-host="{host_id}"] article.gpu')
    return [await c.get_attribute("data-state") for c in await cards.all()]


async def test_fleet_shows_the_demo_hosts_and_filters(demo, page) -> None:
    await browser_sign_in(page, demo, "admin@demo.example")
    for host in demo.hosts:
        section = page.locator(f'section.host[data-host="{host.host_id}"]')
        await section.wait_for()
        badge = section.locator("[data-freshness]")
        assert await badge.get_attribute("data-freshness") == host.role, host.name
        assert await card_states(page, host.host_id) == CARD_STATES[host.role], host.name
    error = page.locator(f'section.host[data-host="{host_of(demo, "error").host_id}"]')
    assert "could not read its GPUs (nvml_init_failed)" in await error.inner_text()
    ok = page.locator(f'section.host[data-host="{host_of(demo, "ok").host_id}"]')
    assert "Held by carol, dave" in await ok.inner_text()
    counts = {
        key: int(await page.locator(f'[data-count="{key}"]').inner_text())
        for key in ("idle", "active", "idle_held", "not_observed")
    }
    assert counts == {"idle": 3, "active": 6, "idle_held": 3, "not_observed": 4}
    await screenshots(page, "fleet")

    # Filters apply without a reload and stay in the address bar.
    await page.evaluate("window.__sameDocument = true")
    await page.select_option("#f-state", "idle_held")
    cards = page.locator("article.gpu")
    await expect(cards).to_have_count(3)
    assert {await c.get_attribute("data-state") for c in await cards.all()} == {"idle_held"}
    assert page.url.endswith("/w/demo/?state=idle_held")
    await page.select_option("#f-host", host_of(demo, "partial").host_id)
    await expect(cards).to_have_count(1)
    assert await page.evaluate("window.__sameDocument") is True


async def test_a_card_changes_state_after_a_push_without_reload(demo, page) -> None:
    await browser_sign_in(page, demo, "lead@demo.example")
    host = host_of(demo, "ok")
    card = f'[data-gpu="{host.host_id}/GPU-2"]'
    assert await page.get_attribute(card, "data-state") == "idle"
    await page.evaluate("window.__sameDocument = true")

    demo.paused = True  # the simulator's next tick must not be the newest observation
    await asyncio.sleep(demo.interval + 0.5)
    body = host.observation(datetime.now(UTC))
    gpu = body["gpus"][2]
    gpu.update(utilPct=91, memoryUsedMb=20000, usageState="active")
    gpu["processes"] = [
        {
            "pid": 4242,
            "linuxUser": "erin",
            "name": "train.py",
            "type": "compute",
            "memoryUsedMb": 19000,
        }
    ]
    pushed = await demo.client.post(
        "/agent/v1/observations",
        json=body,
        headers={"Authorization": f"Bearer {host.agent_token}"},
    )
    assert pushed.status_code == 202, pushed.text

    await page.wait_for_selector(f'{card}[data-state="active"]', timeout=15_000)
    assert "Held by erin" in await page.inner_text(card)
    assert await page.evaluate("window.__sameDocument") is True
    counts = int(await page.inner_text('[data-count="active"]'))
    assert counts == 7  # the six active before (the partial host's busy card included), + 1


async def test_enroll_a_host_from_the_admin_page_then_revoke_it(demo, page) -> None:
    await browser_sign_in(page, demo, "admin@demo.example")
    await page.click("nav >> text=Admin")
    await page.fill("#e-name", "lab-new")
    await page.click("text=Issue enrollment token")
    token = (await page.inner_text("[data-token]")).strip()
    assert token.startswith("gua_enroll_")
    command = (await page.inner_text("#enroll-command")).strip()
    assert command == f"gua enroll --server-url {demo.url} --enrollment-token {token}"
    await screenshots(page, "admin")

    await page.click("nav >> text=Fleet")
    await page.evaluate("window.__sameDocument = true")
    claimed = await demo.client.post(
        "/agent/v1/enrollments/claim",
        json={"enrollmentToken": token, "hostname": "lab-new-01", "agentVersion": "1.8.0"},
    )
    assert claimed.status_code == 201, claimed.text
    agent = claimed.json()
    assert agent["displayName"] == "lab-new"
    fake = FakeCollector("lab-new-01")
    auth = {"Authorization": f"Bearer {agent['agentToken']}"}
    pushed = await demo.client.post(
        "/agent/v1/observations", json=fake.observation(datetime.now(UTC)), headers=auth
    )
    assert pushed.status_code == 202, pushed.text
    # The fleet refreshes itself; a refresh read between the claim and the push shows
    # the host first as never observed, the next one as fresh.
    section = page.locator(f'section.host[data-host="{agent["hostId"]}"]')
    await section.locator('[data-freshness="ok"]').wait_for(timeout=30_000)
    assert await page.evaluate("window.__sameDocument") is True

    # The token was used once: the admin page lists it as claimed by the new host.
    await page.click("nav >> text=Admin")
    prefix = token[: len("gua_enroll_") + 8]  # the kind and the public id, never the secret
    row = page.locator(f'tr[data-token-prefix="{prefix}"]')
    assert "claimed" in await row.inner_text()
    assert "lab-new" in await row.inner_text()
    assert token not in await page.content()  # shown once, never again

    page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
    await page.click('button[aria-label="Revoke host lab-new"]')
    await page.wait_for_selector("text=The host was revoked")
    assert await page.locator(f'tr[data-host-row="{agent["hostId"]}"]').count() == 0
    refused = await demo.client.post(
        "/agent/v1/observations", json=fake.observation(datetime.now(UTC)), headers=auth
    )
    assert refused.status_code == 401
    await page.click("nav >> text=Fleet")
    assert await page.locator(f'section.host[data-host="{agent["hostId"]}"]').count() == 0


async def test_usage_csv_is_the_rest_report_csv(demo, page, tmp_path: Path) -> None:
    await asyncio.wait_for(demo.backfilled.wait(), timeout=60)
    demo.paused = True  # figures hold still between the two downloads
    await asyncio.sleep(demo.interval + 0.5)
    await browser_sign_in(page, demo, "finance@demo.example")
    await page.click("nav >> text=Usage")
    await page.wait_for_selector("#usage-table")
    table = await page.inner_text("#usage-table")
    for user in ("alice", "bob", "carol", "dave"):
        assert user in table
    assert "gdm" not in table  # a graphics process never holds a GPU
    # bob only ever keeps an idle kernel: his idle-held share is all of it, and marked.
    bob = page.locator("#usage-table tbody tr", has_text="bob")
    assert (await bob.locator(".share-high").inner_text()).strip() == "100 %"

    async with page.expect_download() as info:
        await page.click("#csv-link")
    download = await info.value
    saved = tmp_path / "usage.csv"
    await download.save_as(saved)
    from_page = saved.read_bytes().decode()  # bytes: the CSV's lines end in CRLF

    href = await page.get_attribute("#csv-link", "href")
    query = dict(re.findall(r"([A-Za-z]+)=([^&]+)", href.split("?", 1)[1]))
    token = await api_token(demo, "finance@demo.example")
    rest = await demo.client.get(
        f"/api/v1/workspaces/demo/reports/usage?{urlencode(query)}&format=csv",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert rest.status_code == 200, rest.text
    assert from_page == rest.text
    assert from_page.splitlines()[0].startswith("user,heldGpuHours,activeGpuHours")
    await screenshots(page, "usage")


async def test_finance_cannot_reach_admin_or_process_details(demo, page) -> None:
    await browser_sign_in(page, demo, "finance@demo.example")
    assert await page.locator("nav >> text=Admin").count() == 0
    assert "Held by" not in await page.inner_text("main")
    response = await page.goto(f"{demo.url}/w/demo/admin")
    assert response.status == 403
    assert "Not allowed" in await page.inner_text("main")
    host = host_of(demo, "ok")
    await page.goto(f"{demo.url}/w/demo/hosts/{host.host_id}")
    assert "Process details are not shown to the finance role." in await page.inner_text("main")
    assert "jupyter" not in await page.content()
    data = await page.evaluate(f"fetch('/w/demo/hosts/{host.host_id}.json').then(r => r.json())")
    assert all(g["holders"] is None for g in data["gpus"])


async def test_wrong_password_is_refused_and_sign_in_works_by_keyboard(demo, page) -> None:
    await page.goto(f"{demo.url}/w/demo/usage")
    assert "/signin?next=" in page.url
    await page.keyboard.type("admin@demo.example")  # the email field has the focus
    await page.keyboard.press("Tab")
    await page.keyboard.type("not-the-password")
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#signin-error")
    assert "Wrong email or password." in await page.inner_text("#signin-error")
    assert "/signin" in page.url
    assert await page.evaluate("document.activeElement.id") == "password"
    await page.keyboard.type(demo.password)
    await page.keyboard.press("Enter")
    await page.wait_for_url(re.compile(r".*/w/demo/usage$"))
    # Every control of the page is reachable with Tab, in order, starting at the skip link.
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.textContent") == "Skip to content"


async def test_host_page_chart_processes_and_rejected_pushes(demo, page) -> None:
    host = host_of(demo, "partial")
    bad = copy.deepcopy(host.observation(datetime.now(UTC)))
    bad["gpus"][0]["utilPct"] = 101
    rejected = await demo.client.post(
        "/agent/v1/observations", json=bad, headers={"Authorization": f"Bearer {host.agent_token}"}
    )
    assert rejected.status_code == 422
    await asyncio.wait_for(demo.backfilled.wait(), timeout=60)

    await browser_sign_in(page, demo, "lead@demo.example")
    await page.click(f'section.host[data-host="{host.host_id}"] h2 a')
    await page.wait_for_url(re.compile(rf".*/hosts/{host.host_id}$"))
    assert await page.locator("figure.chart svg path.line").count() >= 4
    processes = await page.inner_text('[data-fragment="processes"]')
    for name in ("alice", "bob", "jupyter", "Xorg"):
        assert name in processes
    problems = await page.inner_text('[data-fragment="problems"]')
    assert "process_list_unavailable" in problems
    assert "Rejected pushes" in problems
    assert "None." not in problems.split("Rejected pushes", 1)[1]
    assert "Process list unavailable: state derived" in await page.inner_text(
        '[data-fragment="gpus"]'
    )
    await page.wait_for_selector("[data-live-target] svg polyline", timeout=15_000)
    # The demo's hosts stream utilization every second, as agents 1.6+ do: relayed live.
    await expect(page.locator("[data-live-note]")).to_have_text(
        "(streamed by the agent, every second)", timeout=15_000
    )
    await screenshots(page, "host")
