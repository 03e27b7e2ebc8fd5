"""Prices: what a price list may hold (numbers, currencies and dates, each odd form
refused with a sentence or stored as the number it is), the cost they make (exact
decimal sums), and a price's instant, fixed when it was set whatever the workspace's
zone does later.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.board.answers import refused
from tests.board.builders import JSON
from tests.board.test_reports_builders import quick_tenant


async def test_prices_refuse_odd_numbers(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await quick_tenant(app, "price")
    url = f"/api/v1/workspaces/{tenant.slug}/prices"

    def one(per_hour: str, day: str = "2030-01-01", currency: str = '"EUR"') -> bytes:
        return (
            f'{{"currency": {currency}, "prices": [{{"gpuModel": "*", '
            f'"perGpuHour": {per_hour}, "from": "{day}"}}]}}'
        ).encode()

    for body in (
        one("NaN"),
        one('"NaN"'),
        one("Infinity"),
        one("1e309"),
        one("1180591620717411303424"),
        one("-1"),
        one('"1e-7"'),
        one("1", "0001-01-01"),
        one("1", "9999-12-31"),
        one("1", currency='"\\u0000"'),
        one("1", currency='"eur"'),
        one("1", currency='"' + "E" * 1000 + '"'),
    ):
        refused(await client.put(url, content=body, headers={**tenant.auth(), **JSON}), 422)
    r = await client.get(url, headers=tenant.auth())
    assert r.json()["currency"] is None, r.text
    assert r.json()["prices"] == [], r.text
