"""The booking form over plain HTTP (in-process): the warning before booking a GPU
someone else is on, refusals in the form's own words (labels, local times, host and GPU
names), and the bookings list (which GPUs, the zone, the host link, time inputs)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tests.board.builders import enroll, make_tenant, push
from tests.board.test_reports_builders import gpu, observation, proc
from tests.web.helpers import csrf_of, sign_in

BERLIN = ZoneInfo("Europe/Berlin")
SHOWN = "%Y-%m-%d %H:%M"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


async def _lab(app: Any, client: Any, slug: str) -> tuple[Any, dict[str, Any], str]:
    """A workspace in Berlin time whose host `node` has bob on GPU 1 and GPU 2 now; the
    member is signed in on the reservations page. (tenant, host, CSRF token)."""
    tenant = await make_tenant(app, slug)
    r = await client.patch(
        f"/api/v1/workspaces/{slug}/settings",
        json={"timezone": "Europe/Berlin"},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    host = await enroll(client, tenant, "node")
    gpus = [
        gpu(0, util=90, state="active", procs=[proc("alice")]),
        gpu(1, util=0, state="idle_held", procs=[proc("bob")]),
        gpu(2, util=80, state="active", procs=[proc("bob")]),
        gpu(3, util=0, state="idle", procs=[]),
    ]
    r = await push(client, host["agentToken"], observation(datetime.now(UTC), gpus))
    assert r.status_code == 202, r.text
    for user, email in (("alice", f"member@{slug}.example"), ("bob", f"admin@{slug}.example")):
        r = await client.put(
            f"/api/v1/workspaces/{slug}/directory/{user}",
            json={"memberEmail": email, "team": None},
            headers=tenant.auth(),
        )
        assert r.status_code == 200, r.text
    await sign_in(client, f"member@{slug}.example")
    page = await client.get(f"/w/{slug}/reservations?host={host['hostId']}")
    return tenant, host, csrf_of(page.text)


def _form(token: str, host: str, gpus: list[str], start: datetime, hours: int = 2) -> Any:
    return {
        "csrf_token": token,
        "host": host,
        "gpus": gpus,
        "start": start.astimezone(BERLIN).strftime(SHOWN),
        "end": (start + timedelta(hours=hours)).astimezone(BERLIN).strftime(SHOWN),
    }


async def _listed(client: Any, tenant: Any) -> list[dict[str, Any]]:
    r = await client.get(f"/api/v1/workspaces/{tenant.slug}/reservations", headers=tenant.auth())
    return list(r.json()["reservations"])


def _now() -> datetime:
    return datetime.now(UTC).replace(second=0, microsecond=0)


async def test_booking_a_busy_gpu_warns_and_books_only_once_confirmed(app, client) -> None:
    tenant, host, token = await _lab(app, client, "busypage")
    url = f"/w/{tenant.slug}/reservations"
    form = _form(token, host["hostId"], ["GPU-2", "GPU-3"], _now())

    warned = await client.post(url, data=form)
    assert warned.status_code == 200
    admin = f"admin@{tenant.slug}.example"
    assert 'id="resv-busy"' in warned.text
    assert "Someone else is on this GPU of node now" in warned.text
    assert f"GPU 2 is in use now by bob ({admin})." in warned.text
    assert "Book anyway</button>" in warned.text
    assert await _listed(client, tenant) == []  # nothing is booked until confirmed
    assert 'value="GPU-2" checked' in warned.text  # the form as it was filled in
    confirm = re.search(r'name="confirm" value="([0-9a-f]+)"', warned.text)
    assert confirm

    # A confirmation of bob on GPU 2 does not cover GPU 1 (bob idle-holds it too, but
    # that was never shown): warned again, still nothing booked.
    other = {**form, "gpus": ["GPU-1"], "confirm": confirm.group(1)}
    again = await client.post(url, data=other)
    assert "GPU 1 is idle-held now by bob" in again.text
    assert await _listed(client, tenant) == []

    booked = await client.post(url, data={**form, "confirm": confirm.group(1)})
    assert booked.status_code == 303, booked.text[:500]
    (made,) = await _listed(client, tenant)
    assert made["gpuUuids"] == ["GPU-2", "GPU-3"]


async def test_no_warning_for_ones_own_gpu_an_idle_one_or_a_later_start(app, client) -> None:
    tenant, host, token = await _lab(app, client, "busypage")
    url = f"/w/{tenant.slug}/reservations"
    # alice is the member's own account (the directory links her): no one else is on GPU 0.
    for gpus, start in (
        (["GPU-0"], _now()),
        (["GPU-3"], _now() + timedelta(hours=3)),
        (["GPU-2"], _now() + timedelta(hours=6)),  # bob may be done by then
    ):
        r = await client.post(url, data=_form(token, host["hostId"], gpus, start))
        assert r.status_code == 303, (gpus, r.text[:500])
    assert len(await _listed(client, tenant)) == 3


async def test_refusals_speak_the_forms_language(app, client) -> None:
    tenant, host, token = await _lab(app, client, "words")
    url = f"/w/{tenant.slug}/reservations"
    start = _now() + timedelta(hours=2)
    first = await client.post(url, data=_form(token, host["hostId"], ["GPU-0", "GPU-3"], start))
    assert first.status_code == 303

    def local(moment: datetime) -> str:
        return moment.astimezone(BERLIN).strftime(SHOWN)

    # Overlap: GPUs by name, the host's name, the member, Berlin times; no id, no UTC.
    clash = await client.post(
        url, data=_form(token, host["hostId"], ["GPU-3", "GPU-0"], start + timedelta(hours=1))
    )
    assert clash.status_code == 409
    member = f"member@{tenant.slug}.example"
    assert (
        f"GPU 0, GPU 3 of node are already booked by {member} from {local(start)} "
        f"to {local(start + timedelta(hours=2))} (Europe/Berlin)."
    ) in clash.text
    error = clash.text[clash.text.index('id="resv-error"') :][:400]
    assert not UUID.search(error)
    assert "+00:00" not in error

    cases = [
        ({"end": _form(token, "", [], start)["start"]}, "End must be after Start."),
        ({"start": "tomorrow"}, "Start: &#39;tomorrow&#39; is not a date and time; write it"),
        (
            _form(token, host["hostId"], ["GPU-1"], _now() - timedelta(hours=1)),
            f"Start ({local(_now() - timedelta(hours=1))} Europe/Berlin) has passed",
        ),
        ({"host": "not-a-host"}, "Host: pick one of this workspace&#39;s hosts"),
        ({"gpus": ["GPU-9"]}, "GPUs: tick GPUs of node, each once."),
        ({"note": "a\x00b"}, "Note: "),
    ]
    base = _form(token, host["hostId"], ["GPU-1"], start + timedelta(hours=5))
    for change, said in cases:
        r = await client.post(url, data={**base, **change})
        assert r.status_code == 422, change
        assert said in r.text, (change, r.text[r.text.find("resv-error") :][:300])
        shown = r.text[r.text.index('id="resv-error"') :][:400]
        for api_words in ("hostId", "+00:00", "gpuUuids"):
            assert api_words not in shown, change

    # Changing a booking's end: the label is the change form's, times are Berlin's.
    (made,) = await _listed(client, tenant)
    end_url = f"{url}/{made['reservationId']}/end"
    before = await client.post(end_url, data={"csrf_token": token, "end": local(start)})
    assert before.status_code == 422
    assert f"New end must be after the booking&#39;s start ({local(start)} Europe/Berlin)." in (
        before.text
    )
    assert "+00:00" not in before.text[before.text.index('id="resv-error"') :][:400]


async def test_bookings_list_names_gpus_the_zone_and_links_the_host(app, client) -> None:
    tenant, host, token = await _lab(app, client, "list")
    start = _now() + timedelta(hours=2)
    r = await client.post(
        f"/w/{tenant.slug}/reservations",
        data=_form(token, host["hostId"], ["GPU-3", "GPU-0"], start),
    )
    assert r.status_code == 303
    page = await client.get(r.headers["location"])
    table = page.text[page.text.index('id="my-bookings"') :]
    table = table[: table.index("</table>")]
    assert '<td data-label="GPUs" class="resv-gpu-names">GPU 0, GPU 3</td>' in table
    link = f'<a class="nowrap" href="/w/{tenant.slug}/hosts/{host["hostId"]}">node</a>'
    assert link in table
    assert "Times in Europe/Berlin." in page.text
    when = start.astimezone(BERLIN)
    assert when.strftime("%a %Y-%m-%d %H:%M") in table
    # Time inputs take what the page shows (YYYY-MM-DD HH:MM), not the browser's locale.
    assert 'type="datetime-local"' not in page.text
    end = (start + timedelta(hours=2)).astimezone(BERLIN).strftime(SHOWN)
    assert f'value="{end}"' in table
    assert 'placeholder="YYYY-MM-DD HH:MM"' in page.text


async def test_usage_page_says_a_reversed_range_in_its_labels(app, client) -> None:
    tenant = await make_tenant(app, "usagewords")
    await sign_in(client, f"member@{tenant.slug}.example")
    r = await client.get(
        f"/w/{tenant.slug}/usage", params={"from": "2026-12-02", "through": "2026-12-01"}
    )
    assert r.status_code == 422
    assert "Through must be on or after From." in r.text
    for api_words in ("[from, to)", "+00:00"):
        assert api_words not in r.text
