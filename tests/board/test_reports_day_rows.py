"""Usage reports keyed by local day or month read whole UTC days from their day rows, in
every zone: a day row counts on the local day (month) of its UTC noon, and its hours
that start on another one are read again from the hour rows, once as themselves and
once taken back from the noon's day (board.reports.repository.rollup_rows, `moved`).

The oracle is the same report with every day marked dirty, so that it reads each hour
as it is (what these reports did before, in a zone whose days are not UTC days): every
body, JSON and CSV, streamed (the REST report) or built (the pages' service), is the
same byte for byte, with costs by GPU model, a price that starts inside a UTC day,
electricity prices and carbon intensities, energy, two users on two GPUs.

The FOCUS export is read a local day at a time (board.money.focus): its body is the one
a single statement over the whole window gives.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import psycopg

from board.db.urls import libpq_url
from board.money import focus
from board.pricing.cost import has_renames, workspace_currency
from board.reportkit import params
from board.reportkit.csv import LINE_END, csv_cells
from board.reports.service import usage_report, usage_scope
from board.rollups.daily import refresh_day_rollups
from tests.board.budget_builders import set_team, set_zone
from tests.board.builders import Tenant, enroll, make_tenant, push
from tests.board.test_reports_builders import days_ago_midnight, gpu, observation, workspace_id

HOUR = timedelta(hours=1)
HOUR_US = 3_600_000_000
FIRST = datetime(2026, 10, 29, tzinfo=UTC)
HOURS = 36 * 24
USERS = ("dana", "eve")
MODELS = ("NVIDIA A100", "NVIDIA H100")


def held_us(i: int, gpu_at: int, user: str) -> int:
    """A user's held µs on a GPU in hour i: different from hour to hour, so an hour
    counted on the wrong day changes that day's sums."""
    shift = (0 if user == "dana" else 37) + 11 * gpu_at
    return ((i * 7 + shift) % 50 + 1) * (HOUR_US // 100)


async def seed(app: Any, client: httpx.AsyncClient, tenant: Tenant) -> int:
    """Two GPUs of two models, every hour of FIRST .. +36 days held by dana and eve with
    energy; prices by model with one starting inside a UTC day, electricity prices and
    carbon intensities; the day rows refreshed. The workspace's id."""
    host = await enroll(client, tenant)
    cards = [gpu(0), gpu(1)]
    cards[1]["name"] = MODELS[1]
    r = await push(client, host["agentToken"], observation(days_ago_midnight(1), cards))
    assert r.status_code == 202, r.text
    base = f"/api/v1/workspaces/{tenant.slug}"
    await set_zone(client, tenant, "Asia/Kolkata")  # prices start at its midnights
    prices = {
        "currency": "EUR",
        "prices": [
            {"gpuModel": "*", "perGpuHour": "1.10", "from": "2026-10-01"},
            {"gpuModel": MODELS[1], "perGpuHour": "2.35", "from": "2026-10-01"},
            # Inside a UTC day (10:00 UTC): that day is read from its hours.
            {"gpuModel": MODELS[1], "perGpuHour": "3.05", "from": "2026-11-14"},
        ],
    }
    r = await client.put(f"{base}/prices", json=prices, headers=tenant.auth())
    assert r.status_code == 200, r.text
    energy = {
        "prices": [
            {"perKWh": "0.21", "from": "2026-10-01"},
            {"perKWh": "0.4", "from": "2026-11-20"},
        ]
    }
    r = await client.put(f"{base}/energy-prices", json=energy, headers=tenant.auth())
    assert r.status_code == 200, r.text
    carbon = {"values": [{"gramsPerKWh": 380, "from": "2026-10-01"}]}
    r = await client.put(f"{base}/carbon-intensity", json=carbon, headers=tenant.auth())
    assert r.status_code == 200, r.text

    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        cur = await conn.execute(
            "SELECT id, host_id FROM gpus WHERE workspace_id = %s ORDER BY gpu_index", [ws]
        )
        gpus = await cur.fetchall()
        hours = [FIRST + i * HOUR for i in range(HOURS)]
        for at, (gpu_id, host_id) in enumerate(gpus):
            per_user = [[held_us(i, at, u) for i in range(HOURS)] for u in USERS]
            held = [sum(x) for x in zip(*per_user, strict=True)]
            await conn.execute(
                """
                INSERT INTO gpu_hour_rollups (workspace_id, gpu_id, hour_start, host_id,
                    covered_us, active_us, idle_held_us, idle_us, util_pct_us,
                    memory_used_mb_us, memory_total_mb_us, sample_count, energy_covered_us,
                    active_energy_uws, idle_held_energy_uws, idle_energy_uws)
                SELECT %s, %s, h, %s, 3600000000, x, 0, 3600000000 - x, 50 * 3600000000::bigint,
                       0, 3600000000, 120, 3600000000, 300 * x, 0, 60 * (3600000000 - x)
                FROM unnest(%s::timestamptz[], %s::bigint[]) AS s(h, x)
                """,
                [ws, gpu_id, host_id, hours, held],
            )
            for user, values in zip(USERS, per_user, strict=True):
                await conn.execute(
                    """
                    INSERT INTO user_hour_rollups (workspace_id, gpu_id, linux_user, hour_start,
                        host_id, held_us, active_us, idle_held_us, energy_held_us,
                        active_energy_uws, idle_held_energy_uws)
                    SELECT %s, %s, %s, h, %s, x, x, 0, x, 300 * x, 0
                    FROM unnest(%s::timestamptz[], %s::bigint[]) AS s(h, x)
                    """,
                    [ws, gpu_id, user, host_id, hours, values],
                )
        await refresh_day_rollups(conn)
        cur = await conn.execute(
            "SELECT count(*) FROM rollup_dirty_days WHERE workspace_id = %s AND day_start < %s",
            [ws, FIRST + timedelta(days=36)],
        )
        # Clean (the UTC day a price starts inside, 2026-11-13, is read from its hours).
        assert await cur.fetchone() == (0,)
    await set_team(client, tenant, "dana", "ml")
    return ws


async def mark_every_day_dirty(app: Any, ws: int) -> None:
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO rollup_dirty_days (workspace_id, day_start) "
            "SELECT %s, generate_series(%s::timestamptz, %s, interval '1 day') "
            "ON CONFLICT DO NOTHING",
            [ws, FIRST - timedelta(days=2), FIRST + timedelta(days=38)],
        )


ZONES = [
    "Europe/Berlin",  # +01:00: the last UTC hour of a day is the next local day's
    "America/New_York",  # -05:00 and -04:00 (DST ends on 2026-11-01): the first hours
    "Asia/Kolkata",  # +05:30: days of the UTC hours that start on them
    "Pacific/Chatham",  # +13:45: a UTC day's noon is the next local day
    "UTC",
]
WINDOWS = [("2026-11-01", "2026-12-01"), ("2026-10-30", "2026-12-03"), ("2026-11-13", "2026-11-16")]
GROUPS = ["day", "month", "user,day", "team,month", "gpu,day", "host,month", "day,user"]


async def bodies(
    app: Any, client: httpx.AsyncClient, tenant: Tenant, ws: int
) -> dict[tuple[str, ...], bytes]:
    """Every zone, window and grouping: the REST report's JSON and CSV, and the
    service's JSON (as the pages read it)."""
    found: dict[tuple[str, ...], bytes] = {}
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url) as conn:
        for zone in ZONES:
            for first, following in WINDOWS:
                window = params.parse_window(first, following, zone)
                for group in GROUPS:
                    query = {"from": first, "to": following, "tz": zone, "groupBy": group}
                    for fmt in ("json", "csv"):
                        r = await client.get(
                            f"/api/v1/workspaces/{tenant.slug}/reports/usage",
                            params={**query, "format": fmt},
                            headers=tenant.auth("finance"),
                        )
                        assert r.status_code == 200, r.text
                        found[(zone, first, group, fmt)] = r.content
                    keys = tuple(group.split(","))
                    report = await usage_report(conn, ws, window, keys)
                    await conn.rollback()
                    found[(zone, first, group, "service")] = orjson.dumps(report.as_json())
    return found


async def test_day_rows_give_the_bodies_the_hours_give(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "dayrows")
    ws = await seed(app, client, tenant)
    from_day_rows = await bodies(app, client, tenant, ws)
    await mark_every_day_dirty(app, ws)
    from_hours = await bodies(app, client, tenant, ws)
    assert from_day_rows.keys() == from_hours.keys()
    for key, body in from_hours.items():
        assert from_day_rows[key] == body, key
    # The days are there, with their figures (not an empty report twice).
    month = orjson.loads(from_hours[("Europe/Berlin", "2026-11-01", "day", "json")])
    assert len(month["rows"]) == 30
    assert all(row["heldGpuHours"] > 0 and row["cost"] > 0 for row in month["rows"])
    assert month["totals"]["energyCost"]
    assert month["totals"]["co2eKg"]


async def focus_at_once(
    conn: psycopg.AsyncConnection[Any], ws: int, window: params.Window
) -> bytes:
    """The FOCUS export of the window from one statement over all of it (as it was read
    before it was read a day at a time): the oracle of the test below."""
    currency = await workspace_currency(conn, ws)
    assert currency is not None
    cur = await conn.execute("SELECT slug, name FROM workspaces WHERE id = %s", [ws])
    slug, name = await cur.fetchone() or ("", "")
    account = focus.Account(slug=slug, name=name)
    scope = await usage_scope(conn, ws, window, day_keyed=True)
    statement = focus._ROWS_SQL[(await has_renames(conn, ws), scope.rates.in_force)]
    rows = await (await conn.execute(statement, scope.params())).fetchall()
    periods = focus._Periods(window)
    lines = [csv_cells(focus.COLUMNS)]
    lines += [csv_cells(focus.focus_row(account, currency, periods, r)) for r in rows]
    return (LINE_END.join(lines) + LINE_END).encode()


async def test_focus_read_a_day_at_a_time_is_the_window_at_once(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "dayrows")
    ws = await seed(app, client, tenant)
    url = libpq_url(app.state.runtime.database_url)
    windows = [*WINDOWS, ("2026-11-05T10:00:00Z", "2026-11-07T15:00:00Z")]
    async with await psycopg.AsyncConnection.connect(url) as conn:
        for zone in ZONES:
            for first, following in windows:
                r = await client.get(
                    f"/api/v1/workspaces/{tenant.slug}/reports/focus",
                    params={"from": first, "to": following, "tz": zone},
                    headers=tenant.auth("finance"),
                )
                assert r.status_code == 200, r.text
                window = params.parse_window(first, following, zone)
                expected = await focus_at_once(conn, ws, window)
                await conn.rollback()
                assert r.content == expected, (zone, first)
                assert r.content.count(b"\n") > 2 * 2  # rows of both users
