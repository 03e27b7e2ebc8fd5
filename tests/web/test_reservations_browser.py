"""Reservations in Debian's Chromium: booking from the page, the warning before booking a
GPU someone is on (by keyboard), the overlap refusal naming the other booking,
cancelling, the directory page, and the availability badges."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import httpx
from playwright.async_api import expect

from tests.web.helpers import browser_sign_in, screenshots
from tests.web.test_browser import api_token, host_of

LOCAL = "%Y-%m-%d %H:%M"  # how the page writes times, and its time inputs take them


async def _shifted(page: Any, selector: str, hours: int) -> str:
    """The form's default time (the workspace's local now) moved by `hours`."""
    value = await page.input_value(selector)
    return (datetime.strptime(value, LOCAL) + timedelta(hours=hours)).strftime(LOCAL)


async def _book(page: Any, host_id: str, start_hours: int, end_hours: int, note: str) -> None:
    await page.select_option("#b-host", host_id)  # the script reloads with the host's GPUs
    await page.wait_for_url(f"**host={host_id}**")
    await page.locator('#b-gpus input[name="gpus"]').first.check()
    start = await _shifted(page, "#b-start", start_hours)
    end = await _shifted(page, "#b-start", end_hours)
    await page.fill("#b-start", start)
    await page.fill("#b-end", end)
    await page.fill("#b-note", note)
    await page.click("#book-submit")


async def test_book_refuse_overlap_and_cancel_from_the_page(demo, page) -> None:
    host = host_of(demo, "ok")
    await browser_sign_in(page, demo, "lead@demo.example")
    await page.click('nav a:has-text("Reservations")')
    await expect(page.locator("h1")).to_have_text("Reservations")

    # Two hours ahead: GPU 0 is someone's now, but that is no matter for a later start.
    await _book(page, host.host_id, 2, 4, "training run")
    await expect(page.locator("#resv-notice")).to_have_text("Booked.")
    rows = page.locator("#my-bookings tbody tr")
    await expect(rows).to_have_count(1)
    assert "training run" in await rows.first.inner_text()
    bar = page.locator("#timeline .tl-bar").first
    assert "lead@demo.example — training run" in (await bar.text_content() or "")

    # The same GPU, overlapping: refused with the other booking's member and times.
    await _book(page, host.host_id, 3, 5, "clash")
    error = page.locator("#resv-error")
    # In the form's words: the GPU and host by name, local times, no id.
    await expect(error).to_contain_text(
        f"GPU 0 of {host.name} is already booked by lead@demo.example from "
    )
    assert "+00:00" not in (await error.inner_text())
    await expect(rows).to_have_count(1)
    assert await page.input_value("#b-note") == "clash"  # the form is kept
    await screenshots(page, "reservations")

    # Extend it by an hour, then cancel it (keyboard: focus the button, press Enter).
    end = page.locator("#my-bookings input.resv-time").first
    later = (datetime.strptime(await end.input_value(), LOCAL) + timedelta(hours=1)).strftime(LOCAL)
    await end.fill(later)
    await page.locator('#my-bookings button:has-text("Change end")').first.click()
    await expect(page.locator("#resv-notice")).to_contain_text("end was changed")
    assert await page.locator("#my-bookings input.resv-time").first.input_value() == later
    page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
    cancel = page.locator('#my-bookings button:has-text("Cancel")').first
    await cancel.focus()
    await page.keyboard.press("Enter")
    await expect(page.locator("#resv-notice")).to_contain_text("cancelled")
    await expect(page.locator("#my-bookings")).to_have_count(0)


async def test_booking_a_busy_gpu_by_keyboard_warns_first(demo, page) -> None:
    """From a GPU card's "Book this GPU", by keyboard: the page names who is on the GPU
    now and books only on "Book anyway" (at 1280 px, then at 390 px on another GPU)."""
    host = host_of(demo, "ok")
    token = await api_token(demo, "lead@demo.example")
    async with httpx.AsyncClient(base_url=demo.url, timeout=30) as client:
        shown = await client.get(
            f"/api/v1/workspaces/demo/hosts/{host.host_id}",
            headers={"Authorization": f"Bearer {token}"},
        )
    gpus = shown.json()["gpus"]
    await browser_sign_in(page, demo, "lead@demo.example")
    booked = 0
    for width, index in ((1280, 0), (390, 1)):  # GPU 0 active, GPU 1 idle-held
        users = sorted({p["linuxUser"] for p in gpus[index]["processes"]})
        assert users, gpus[index]
        await page.set_viewport_size({"width": width, "height": 900})
        await page.goto(f"{demo.url}/w/demo/?view=cards")
        card = page.locator(f'section.host[data-host="{host.host_id}"] article.gpu').nth(index)
        await card.locator('a:has-text("Book this GPU")').focus()
        await page.keyboard.press("Enter")
        await page.wait_for_url(f"**gpu={gpus[index]['uuid']}**")
        await page.locator("#b-note").focus()
        await page.keyboard.type(f"keyboard {width}")
        await page.keyboard.press("Enter")  # submits the form: it starts now

        busy = page.locator("#resv-busy")
        await expect(busy).to_be_visible()
        state = "in use" if index == 0 else "idle-held"
        await expect(busy).to_contain_text(f"GPU {index} is {state} now by {users[0]}")
        await expect(page.locator("#book-submit")).to_have_text("Book anyway")
        await expect(page.locator("#my-bookings tbody tr")).to_have_count(booked)
        assert await page.input_value("#b-note") == f"keyboard {width}"
        await screenshots(page, f"reservations-busy-{index}")
        await page.set_viewport_size({"width": width, "height": 900})

        await page.locator("#book-submit").focus()
        await page.keyboard.press("Enter")
        await expect(page.locator("#resv-notice")).to_have_text("Booked.")
        booked += 1
        row = page.locator("#my-bookings tbody tr").nth(booked - 1)
        await expect(page.locator("#my-bookings tbody tr")).to_have_count(booked)
    await expect(page.locator("#my-bookings .resv-gpu-names")).to_have_text(["GPU 0", "GPU 1"])
    await expect(row.locator('td[data-label="Host"] a')).to_have_text(host.name)
    await screenshots(page, "reservations-list")


async def test_finance_sees_no_booking_form(demo, page) -> None:
    await browser_sign_in(page, demo, "finance@demo.example")
    await page.goto(f"{demo.url}/w/demo/reservations")
    await expect(page.locator("#timeline")).to_be_visible()
    await expect(page.locator("#book-form")).to_have_count(0)


async def test_directory_links_a_linux_user_to_a_member(demo, page) -> None:
    await browser_sign_in(page, demo, "admin@demo.example")
    await page.click('nav a:has-text("Directory")')
    seen = page.locator("#dir-entries tbody tr")
    await expect(seen.first).to_be_visible()  # the demo's hosts report carol, dave, …
    await page.fill("#d-user", "newcomer")
    await page.select_option("#d-member", "lead@demo.example")
    await page.fill("#d-team", "vision")
    await page.click('#dir-new button[type="submit"]')
    await expect(page.locator("#dir-notice")).to_have_text("Saved newcomer.")
    row = page.locator('tr[data-linux-user="newcomer"]')
    assert await row.locator("select").input_value() == "lead@demo.example"
    assert await row.locator('input[name="team"]').input_value() == "vision"
    await screenshots(page, "directory")


async def test_availability_badges_on_fleet_and_host_pages(demo, page) -> None:
    host = host_of(demo, "ok")
    token = await api_token(demo, "lead@demo.example")
    async with httpx.AsyncClient(base_url=demo.url, timeout=30) as client:
        gpus = (
            await client.get(
                f"/api/v1/workspaces/demo/hosts/{host.host_id}",
                headers={"Authorization": f"Bearer {token}"},
            )
        ).json()["gpus"]
        now = datetime.now().astimezone().replace(second=0, microsecond=0)
        made = await client.post(
            "/api/v1/workspaces/demo/reservations",
            json={
                "hostId": host.host_id,
                "gpuUuids": [gpus[0]["uuid"]],
                "start": now.isoformat(),
                "end": (now + timedelta(hours=2)).isoformat(),
                "linuxUsers": ["nobody-here"],
                "note": "badge check",
            },
            headers={"Authorization": f"Bearer {token}"},
        )
        assert made.status_code == 201, made.text
    await browser_sign_in(page, demo, "lead@demo.example")
    section = page.locator(f'section.host[data-host="{host.host_id}"]')
    badge = section.locator(f'[data-availability-gpu="{gpus[0]["uuid"]}"]')
    # GPU 0 of an `ok` host runs someone's work: booked for another Linux user, a conflict.
    await expect(badge).to_have_attribute("data-availability", "reserved_conflict")
    other = section.locator(f'[data-availability-gpu="{gpus[2]["uuid"]}"]')
    await expect(other).to_have_attribute("data-availability", "free")
    await page.goto(f"{demo.url}/w/demo/hosts/{host.host_id}")
    on_host = page.locator(f'[data-availability-gpu="{gpus[0]["uuid"]}"]')
    await expect(on_host).to_have_attribute("data-availability", "reserved_conflict")
    timeline = page.locator("#host-reservations .tl-bar")
    await expect(timeline).to_have_count(1)
    assert "badge check" in (await timeline.text_content() or "")
    await screenshots(page, "reservations-host")


def test_reservation_colours_have_4_5_to_1_contrast() -> None:
    """Every text colour reservations.css draws, on the surface it is drawn on."""
    import re
    from pathlib import Path

    from tests.web.test_contrast import contrast

    css = (Path(__file__).resolve().parents[2] / "board/web/static/reservations.css").read_text()
    badges = re.findall(r"\.avail-\w+ \{ background: (#[0-9a-f]{6}); \}", css)
    assert len(badges) == 6
    pairs = [("#ffffff", bg) for bg in badges]
    pairs += [("#ffffff", "#1d4f91"), ("#3d444c", "#f6f7f9"), ("#1b1f24", "#eef1f4")]
    for text, background in pairs:
        assert contrast(text, background) >= 4.5, (text, background)
