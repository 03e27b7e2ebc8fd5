"""The correction window of prices: a typo in a recent price is corrected (or the price
removed) and costs follow; an older price is fixed (409), on the API as on the page.

The fleet is tests/board/money_builders.py's: D three days ago, alice on an A100 (2.00
from d-10, 3.00 from d+1) costs 2 + 3 + 3 = 8.00 EUR, bob on an H100 (only "*", 1.00
from d-10) 3.00. The prices from d-10 are made old enough to be fixed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import pytest

from tests.board.builders import Tenant
from tests.board.money_builders import A100, H100, age_prices, build_fleet
from tests.board.test_reports_builders import quick_tenant, report


def _one(slug: str, model: str, day: str) -> str:
    return f"/api/v1/workspaces/{slug}/prices/{day}/{quote(model, safe='')}"


async def _costs(client: Any, tenant: Tenant, day: datetime) -> dict[str, float]:
    window = {"from": day.date().isoformat(), "to": (day + timedelta(days=2)).date().isoformat()}
    got = await report(client, tenant, "usage", groupBy="user", tz="UTC", **window)
    return {r["user"]: r["cost"] for r in got["rows"]}


async def _events(client: Any, tenant: Tenant, prefix: str) -> list[dict[str, Any]]:
    r = await client.get(f"/api/v1/workspaces/{tenant.slug}/audit-log", headers=tenant.auth())
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["action"].startswith(prefix)]


async def _fleet(client: Any, app: Any, database_url: str) -> tuple[Tenant, datetime]:
    tenant = await quick_tenant(app, "fix")
    day = await build_fleet(client, tenant)
    # Entered 11 days ago: the prices from d-10 are fixed, the one from d+1 is not.
    await age_prices(database_url, tenant.slug, 11)
    return tenant, day


async def test_a_recent_price_is_corrected_and_costs_follow(app, client, database_url) -> None:
    tenant, day = await _fleet(client, app, database_url)
    d1 = (day + timedelta(days=1)).date().isoformat()
    assert await _costs(client, tenant, day) == {"alice": 8.0, "bob": 3.0}

    # The typo: 3.00 should have been 3.50. Two days on, it is corrected.
    r = await client.put(
        _one(tenant.slug, A100, d1), json={"perGpuHour": "3.50"}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    shown = {(p["gpuModel"], p["from"]): p for p in r.json()["prices"]}
    assert shown[(A100, d1)]["perGpuHour"] == 3.5
    assert shown[(A100, d1)]["fixed"] is False
    assert await _costs(client, tenant, day) == {"alice": 9.0, "bob": 3.0}

    # A price forgotten two days ago is added; one entered by mistake is removed.
    r = await client.put(_one(tenant.slug, H100, d1), json={"perGpuHour": 5}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert await _costs(client, tenant, day) == {"alice": 9.0, "bob": 11.0}
    r = await client.delete(_one(tenant.slug, A100, d1), headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert (A100, d1) not in {(p["gpuModel"], p["from"]) for p in r.json()["prices"]}
    assert await _costs(client, tenant, day) == {"alice": 6.0, "bob": 11.0}

    # Each change in the audit log with its amounts and the admin's address.
    events = await _events(client, tenant, "price.")
    assert [
        (e["action"], e["detail"]["previousPerGpuHour"], e["detail"]["perGpuHour"]) for e in events
    ] == [
        ("price.removed", "3.5", None),
        ("price.added", None, "5"),
        ("price.changed", "3", "3.5"),
    ]
    assert all(e["clientAddress"] for e in events)
    assert {e["detail"]["currency"] for e in events} == {"EUR"}
    assert events[-1]["target"] == f"{A100!r} from {d1}"


async def test_a_price_past_its_window_is_fixed(app, client, database_url) -> None:
    tenant, day = await _fleet(client, app, database_url)
    old = (day.date() - timedelta(days=10)).isoformat()
    before = (
        await client.get(f"/api/v1/workspaces/{tenant.slug}/prices", headers=tenant.auth())
    ).json()
    assert [p["fixed"] for p in before["prices"]] == [True, True, False]

    r = await client.put(
        _one(tenant.slug, "*", old), json={"perGpuHour": 1.1}, headers=tenant.auth()
    )
    assert r.status_code == 409, r.text
    assert "is fixed" in r.json()["detail"]
    assert "7 days" in r.json()["detail"]
    r = await client.delete(_one(tenant.slug, A100, old), headers=tenant.auth())
    assert r.status_code == 409, r.text
    assert "is fixed" in r.json()["detail"]
    # A new price may not start further back than the window either.
    nine_days_ago = (datetime.now(UTC).date() - timedelta(days=9)).isoformat()
    r = await client.put(
        _one(tenant.slug, H100, nine_days_ago), json={"perGpuHour": 9}, headers=tenant.auth()
    )
    assert r.status_code == 409, r.text
    assert "more than 7 days ago" in r.json()["detail"]
    # The whole-list PUT follows the same rules.
    body = {"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1.1, "from": old}]}
    r = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/prices", json=body, headers=tenant.auth()
    )
    assert r.status_code == 409, r.text
    assert isinstance(r.json()["detail"], str)

    after = (
        await client.get(f"/api/v1/workspaces/{tenant.slug}/prices", headers=tenant.auth())
    ).json()
    assert after == before
    assert await _costs(client, tenant, day) == {"alice": 8.0, "bob": 3.0}
    assert await _events(client, tenant, "price.") == []


async def test_the_whole_list_put_corrects_recent_prices(app, client, database_url) -> None:
    tenant, day = await _fleet(client, app, database_url)
    d, d1 = day.date(), (day + timedelta(days=1)).date()
    body = {
        "currency": "EUR",
        "prices": [
            # Fixed, sent unchanged: kept.
            {"gpuModel": A100, "perGpuHour": 2, "from": (d - timedelta(days=10)).isoformat()},
            # Recent, corrected.
            {"gpuModel": A100, "perGpuHour": "2.5", "from": d1.isoformat()},
            # Recent, new.
            {"gpuModel": H100, "perGpuHour": 4, "from": d1.isoformat()},
        ],
    }
    r = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/prices", json=body, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    # The "*" price was left out: begun prices are kept (removing one is a DELETE).
    assert [(p["gpuModel"], p["perGpuHour"], p["from"]) for p in r.json()["prices"]] == [
        ("*", 1.0, (d - timedelta(days=10)).isoformat()),
        (A100, 2.0, (d - timedelta(days=10)).isoformat()),
        (A100, 2.5, d1.isoformat()),
        (H100, 4.0, d1.isoformat()),
    ]
    # alice 2 + 2.5 + 2.5, bob 1 + 4 + 4.
    assert await _costs(client, tenant, day) == {"alice": 7.0, "bob": 9.0}
    events = await _events(client, tenant, "price")
    actions = [
        (e["action"], e["detail"].get("perGpuHour"), e["detail"].get("previousPerGpuHour"))
        for e in events
    ]
    assert actions[:3] == [
        ("price.added", "4", None),
        ("price.changed", "2.5", "3"),
        ("prices.put", None, None),
    ]
    assert events[2]["detail"]["corrected"] == 1


async def test_a_backdated_first_list_is_correctable_for_the_window(
    app, client, database_url
) -> None:
    tenant = await quick_tenant(app, "fix")
    quarter = (datetime.now(UTC).date() - timedelta(days=90)).isoformat()
    body = {"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": "0.80", "from": quarter}]}
    r = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/prices", json=body, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    entered = datetime.now(UTC)
    until = datetime.fromisoformat(r.json()["prices"][0]["correctableUntil"])
    assert timedelta(days=6) < until - entered < timedelta(days=7, minutes=5)
    # Entered today, dated last quarter: the typo can still be fixed, and while no price
    # is fixed more may be dated back.
    r = await client.put(
        _one(tenant.slug, "*", quarter), json={"perGpuHour": "0.85"}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    r = await client.put(
        _one(tenant.slug, A100, quarter), json={"perGpuHour": 2}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    # A correction does not extend the window: it counts from when the price was entered.
    await age_prices(database_url, tenant.slug, 8)
    r = await client.put(
        _one(tenant.slug, "*", quarter), json={"perGpuHour": "0.9"}, headers=tenant.auth()
    )
    assert r.status_code == 409, r.text
    r = await client.put(
        _one(tenant.slug, H100, quarter), json={"perGpuHour": 3}, headers=tenant.auth()
    )
    assert r.status_code == 409, r.text


@pytest.mark.parametrize(
    ("model", "day", "body", "status"),
    [
        ("a\u0001b", "2026-01-01", {"perGpuHour": 1}, 422),
        ("x" * 101, "2026-01-01", {"perGpuHour": 1}, 422),
        ("*", "2026-13-01", {"perGpuHour": 1}, 422),
        ("*", "1999-12-31", {"perGpuHour": 1}, 422),
        ("*", "yesterday", {"perGpuHour": 1}, 422),
        ("*", "2026-01-01", {"perGpuHour": -1}, 422),
        ("*", "2026-01-01", {"perGpuHour": "1_0"}, 422),
        ("*", "2026-01-01", {"perGpuHour": 1, "x": 1}, 422),
        ("*", "2026-01-01", [], 422),
    ],
)
async def test_bad_single_prices_are_refused(app, client, model, day, body, status) -> None:
    tenant = await quick_tenant(app, "fix")
    r = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/prices",
        json={"currency": "EUR", "prices": []},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    r = await client.put(_one(tenant.slug, model, day), json=body, headers=tenant.auth())
    assert r.status_code == status, r.text
    assert isinstance(r.json()["detail"], str)
    r = await client.delete(_one(tenant.slug, model, day), headers=tenant.auth())
    assert r.status_code in (404, 422), r.text
    assert isinstance(r.json()["detail"], str)
    shown = (
        await client.get(f"/api/v1/workspaces/{tenant.slug}/prices", headers=tenant.auth())
    ).json()
    assert shown["prices"] == []


async def test_single_prices_roles_tenants_names_and_currency(app, client) -> None:
    tenant = await quick_tenant(app, "fix")
    other = await quick_tenant(app, "fix")
    tomorrow = (datetime.now(UTC).date() + timedelta(days=1)).isoformat()
    # No currency yet: a price has nothing to be in.
    r = await client.put(
        _one(tenant.slug, "*", tomorrow), json={"perGpuHour": 1}, headers=tenant.auth()
    )
    assert r.status_code == 409, r.text
    assert "currency" in r.json()["detail"]
    r = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/prices",
        json={"currency": "JPY", "prices": []},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    # Names are the agents' free text: "/" and markup travel in the last path segment.
    for model in ("NVIDIA A100/80GB", '<img src=x onerror="alert(1)">', "=1+2"):
        r = await client.put(
            _one(tenant.slug, model, tomorrow), json={"perGpuHour": 300}, headers=tenant.auth()
        )
        assert r.status_code == 200, r.text
    shown = (
        await client.get(f"/api/v1/workspaces/{tenant.slug}/prices", headers=tenant.auth())
    ).json()
    assert sorted(p["gpuModel"] for p in shown["prices"]) == sorted(
        ["NVIDIA A100/80GB", '<img src=x onerror="alert(1)">', "=1+2"]
    )
    r = await client.delete(_one(tenant.slug, "NVIDIA A100/80GB", tomorrow), headers=tenant.auth())
    assert r.status_code == 200, r.text
    r = await client.delete(_one(tenant.slug, "NVIDIA A100/80GB", tomorrow), headers=tenant.auth())
    assert r.status_code == 404, r.text
    for role in ("member", "finance"):
        r = await client.put(
            _one(tenant.slug, "=1+2", tomorrow), json={"perGpuHour": 1}, headers=tenant.auth(role)
        )
        assert r.status_code == 403, r.text
        r = await client.delete(_one(tenant.slug, "=1+2", tomorrow), headers=tenant.auth(role))
        assert r.status_code == 403, r.text
    for role in ("admin", "member", "finance"):
        r = await client.put(
            _one(tenant.slug, "=1+2", tomorrow), json={"perGpuHour": 1}, headers=other.auth(role)
        )
        assert r.status_code == 404, r.text
        r = await client.delete(_one(tenant.slug, "=1+2", tomorrow), headers=other.auth(role))
        assert r.status_code == 404, r.text
    assert (await client.delete(_one(tenant.slug, "=1+2", tomorrow))).status_code == 401
    shown = (
        await client.get(f"/api/v1/workspaces/{tenant.slug}/prices", headers=tenant.auth())
    ).json()
    assert [p["perGpuHour"] for p in shown["prices"]] == [300.0, 300.0]


def test_the_window_reaches_back_whole_days_in_any_zone() -> None:
    from board.money.corrections import CorrectionWindow

    window = CorrectionWindow.of_days(7)
    kolkata = ZoneInfo("Asia/Kolkata")
    now = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)  # 17:30 in Kolkata
    # 2026-03-03 17:30 Kolkata is the window's edge: the 3rd's midnight is older.
    assert window.earliest_day(now, kolkata).isoformat() == "2026-03-04"
    start = datetime(2026, 3, 3, 18, 30, tzinfo=UTC)  # the 4th's midnight in Kolkata
    assert window.is_open(now, start)
    assert not window.is_open(now, start - timedelta(days=1))
    # A price dated back is judged from when it was entered.
    assert window.is_open(now, start - timedelta(days=90), entered_at=now - timedelta(days=6))
    assert window.closes_at(start, entered_at=now) == now + timedelta(days=7)
    # Without a window, a price is fixed once it starts.
    assert not CorrectionWindow.of_days(0).is_open(now, now)
    assert CorrectionWindow.of_days(0).earliest_day(now, kolkata).isoformat() == "2026-03-11"
