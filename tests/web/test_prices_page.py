"""The prices page over plain HTTP: currency, prices, corrections within the window and
refusals after it, CSRF, roles, audit, costs that follow, and hostile GPU model names.

The priced fleet is tests/board/money_builders.py's: alice on an A100 costs 2 + 3 + 3 =
8.00 EUR (3.00 from d+1, two days ago), bob on an H100 ("*", 1.00) 3.00.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.board.builders import Tenant, enroll, make_tenant, minutes_ago, push
from tests.board.money_builders import A100, H100, age_prices, build_fleet
from tests.board.test_reports_builders import gpu, observation, report
from tests.web.helpers import csrf_of, sign_in

PAGE = "/w/prc/admin/prices"
EVIL_HTML = '<img src=x onerror="alert(1)">'
EVIL_FORMULA = '=HYPERLINK("http://evil.example","x")'


async def _post(client: Any, path: str, **fields: str) -> Any:
    form = await client.get(PAGE)
    assert form.status_code == 200, form.text
    return await client.post(path, data={"csrf_token": csrf_of(form.text), **fields})


async def _audit(client: Any, tenant: Tenant) -> list[dict[str, Any]]:
    r = await client.get(f"/api/v1/workspaces/{tenant.slug}/audit-log", headers=tenant.auth())
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["action"].startswith(("price.", "currency."))]


def _rows(html: str) -> list[str]:
    """The history table's rows as text, tags dropped."""
    table = html.split('id="prices-table"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr data-state=.*?</tr>", table, re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in rows]


async def test_prices_page_sets_currency_and_prices(app, client) -> None:
    tenant = await make_tenant(app, "prc")
    host = await enroll(client, tenant, "node-a")
    named = [gpu(0), gpu(1)]
    named[0]["name"], named[1]["name"] = EVIL_HTML, EVIL_FORMULA
    assert (
        await push(client, host["agentToken"], observation(minutes_ago(1), named))
    ).status_code == 202
    assert (await sign_in(client, "admin@prc.example")).status_code == 303
    admin = await client.get("/w/prc/admin")
    assert 'href="/w/prc/admin/prices"' in admin.text

    page = await client.get(PAGE)
    assert page.status_code == 200, page.text
    assert "Choose the currency first" in page.text
    # Without the form's token nothing changes.
    r = await client.post(f"{PAGE}/currency", data={"currency": "EUR"})
    assert r.status_code == 403
    assert "Choose the currency first" in (await client.get(PAGE)).text
    r = await _post(client, f"{PAGE}/currency", currency="eur")
    assert r.status_code == 422
    assert "ISO 4217" in r.text
    r = await _post(client, f"{PAGE}/currency", currency="EUR")
    assert r.status_code == 303, r.text

    # The fleet's models are offered, escaped, with "*".
    page = await client.get(PAGE)
    datalist = page.text.split('<datalist id="gpu-models">', 1)[1].split("</datalist>", 1)[0]
    assert 'value="*"' in datalist
    assert 'value="&lt;img src=x onerror=&#34;alert(1)&#34;&gt;"' in datalist
    assert "<img" not in page.text

    tomorrow = (datetime.now(UTC).date() + timedelta(days=1)).isoformat()
    r = await _post(client, PAGE, gpu_model=EVIL_HTML, per_gpu_hour="0.80", **{"from": tomorrow})
    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/w/prc/admin/prices?notice=added#history"
    r = await _post(client, PAGE, gpu_model=EVIL_FORMULA, per_gpu_hour="1", **{"from": tomorrow})
    assert r.status_code == 303, r.text
    page = await client.get(PAGE)
    assert "<img" not in page.text
    rows = _rows(page.text)
    assert rows == [
        f"&lt;img src=x onerror=&#34;alert(1)&#34;&gt; {tomorrow} holds on 0.80 Upcoming "
        "New price per GPU-hour for &lt;img src=x onerror=&#34;alert(1)&#34;&gt; from "
        f"{tomorrow} Correct Remove",
        f"=HYPERLINK(&#34;http://evil.example&#34;,&#34;x&#34;) {tomorrow} holds on 1.00 "
        "Upcoming New price per GPU-hour for =HYPERLINK(&#34;http://evil.example&#34;,&#34;x&#34;) "
        f"from {tomorrow} Correct Remove",
    ]
    # The row's own form corrects it; the same model and date again is that correction.
    r = await _post(client, PAGE, gpu_model=EVIL_HTML, per_gpu_hour="0.85", **{"from": tomorrow})
    assert r.status_code == 303, r.text
    assert "0.85" in _rows((await client.get(PAGE)).text)[0]
    r = await _post(client, f"{PAGE}/remove", gpu_model=EVIL_FORMULA, **{"from": tomorrow})
    assert r.status_code == 303, r.text
    assert len(_rows((await client.get(PAGE)).text)) == 1

    # A bad amount: the sentence, and the form as it was sent.
    r = await _post(client, PAGE, gpu_model=H100, per_gpu_hour="1,5", **{"from": tomorrow})
    assert r.status_code == 422
    assert "perGpuHour must be a number" in r.text
    assert 'value="1,5"' in r.text
    r = await _post(client, f"{PAGE}/remove", gpu_model=H100, **{"from": tomorrow})
    assert r.status_code == 404
    assert "There is no price" in r.text

    events = await _audit(client, tenant)
    assert [
        (e["action"], e["detail"].get("previousPerGpuHour"), e["detail"].get("perGpuHour"))
        for e in events
    ] == [
        ("price.removed", "1", None),
        ("price.changed", "0.8", "0.85"),
        ("price.added", None, "1"),
        ("price.added", None, "0.8"),
        ("currency.set", None, None),
    ]
    assert all(e["clientAddress"] for e in events)


async def test_prices_page_is_for_admins(app, client) -> None:
    await make_tenant(app, "prc")
    await make_tenant(app, "other")
    for role in ("member", "finance"):
        client.cookies.clear()
        assert (await sign_in(client, f"{role}@prc.example")).status_code == 303
        assert (await client.get(PAGE)).status_code == 403
        statements = await client.get("/w/prc/statements")
        assert 'id="prices-link"' not in statements.text
        # A form post with the session's own token is refused all the same.
        token = csrf_of(statements.text)
        r = await client.post(f"{PAGE}/currency", data={"csrf_token": token, "currency": "EUR"})
        assert r.status_code == 403
    client.cookies.clear()
    assert (await sign_in(client, "admin@prc.example")).status_code == 303
    assert 'id="prices-link"' in (await client.get("/w/prc/statements")).text
    assert (await client.get("/w/other/admin/prices")).status_code == 404


async def test_page_corrections_within_and_after_the_window(app, client, database_url) -> None:
    tenant = await make_tenant(app, "prc")
    day = await build_fleet(client, tenant)
    await age_prices(database_url, tenant.slug, 11)  # the prices from d-10 are fixed
    window = {"from": day.date().isoformat(), "to": (day + timedelta(days=2)).date().isoformat()}

    async def costs() -> dict[str, float]:
        got = await report(client, tenant, "usage", groupBy="user", tz="UTC", **window)
        return {r["user"]: r["cost"] for r in got["rows"]}

    assert await costs() == {"alice": 8.0, "bob": 3.0}
    assert (await sign_in(client, "admin@prc.example")).status_code == 303
    old = (day.date() - timedelta(days=10)).isoformat()
    d1 = (day + timedelta(days=1)).date().isoformat()
    page = await client.get(PAGE)
    assert page.text.count('data-state="fixed"') == 2
    assert page.text.count('data-state="open"') == 1
    assert "Correctable until" in page.text
    in_force = page.text.split('id="in-force-table"', 1)[1].split("</table>", 1)[0]
    assert "3.00" in in_force
    assert A100 in in_force

    r = await _post(client, PAGE, gpu_model=A100, per_gpu_hour="3.50", **{"from": d1})
    assert r.status_code == 303, r.text
    assert await costs() == {"alice": 9.0, "bob": 3.0}
    refused = [
        (PAGE, {"gpu_model": "*", "per_gpu_hour": "1.10", "from": old}, "is fixed"),
        (f"{PAGE}/remove", {"gpu_model": A100, "from": old}, "is fixed"),
        (
            PAGE,
            {
                "gpu_model": H100,
                "per_gpu_hour": "4",
                "from": (datetime.now(UTC).date() - timedelta(days=9)).isoformat(),
            },
            "more than 7 days ago",
        ),
        (f"{PAGE}/currency", {"currency": "USD"}, "cannot change"),
    ]
    for path, fields, words in refused:
        r = await _post(client, path, **fields)
        assert r.status_code == 409, (path, r.text)
        assert words in r.text
        assert 'id="prices-error"' in r.text
    assert await costs() == {"alice": 9.0, "bob": 3.0}
    r = await _post(client, f"{PAGE}/remove", gpu_model=A100, **{"from": d1})
    assert r.status_code == 303, r.text
    assert await costs() == {"alice": 6.0, "bob": 3.0}
    assert [e["action"] for e in await _audit(client, tenant)] == ["price.removed", "price.changed"]
