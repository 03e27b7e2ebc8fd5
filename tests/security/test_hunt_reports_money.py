"""Reports, money and exports under a hostile finance user or BI tool: odd ISO forms and
zones, odd prices and currencies, exact totals, FOCUS and statement CSV cells, and the
per-workspace report slots of a client that goes away mid-body on the served board.

Bugs this file found, fixed in board/: an offset's minutes of 60 ("+14:60" read as
+15:00), a price string in other digits or with underscores ("١", "１", "1_0" stored as
1, 1 and 10), a statement month in other digits, a begun price made "future" again by
moving the workspace's zone back (and then replaced), kept utilization bodies stored
once per zone name a reader cared to name, and right/..., posix/..., localtime as a
report's zone (Python and PostgreSQL read right/Europe/Berlin differently).

In process (the app and a real PostgreSQL), except the report slot tests, which need
the served board and real sockets that go away.
"""

from __future__ import annotations

import csv
import io
import socket
import struct
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from board.reports.bodies import MAX_OTHER_ZONES
from board.reports.slots import REPORT_SLOTS, SLOT_LOCK_BASE
from tests.board.answers import refused
from tests.board.builders import Tenant, enroll, push
from tests.board.test_reports_builders import gpu, observation, proc, quick_tenant
from tests.security.conftest import db
from tests.security.seed import Tenant as SeedTenant
from tests.security.seed import enroll as seed_enroll
from tests.security.seed import make_tenant
from tests.security.seed import observation as seed_observation
from tests.security.seed import push as seed_push
from tests.support.live import LiveBoard

JSON = {"Content-Type": "application/json"}
REPORTS = ("reports/usage", "reports/utilization", "reports/focus")
FORMULA_STARTS = tuple("=+-@\t\r\n\uff1d\uff0b\uff0d\uff20")


def base(tenant: Tenant) -> str:
    return f"/api/v1/workspaces/{tenant.slug}"


async def held_hours(
    client: httpx.AsyncClient, tenant: Tenant, start: datetime, users: dict[str, str]
) -> None:
    """Two credited hours from `start`: each GPU model in `users` (model → Linux user)
    held busy by its user on a GPU of its own."""
    host = await enroll(client, tenant, f"node-{tenant.slug}")
    r = await client.patch(
        f"{base(tenant)}/settings",
        json={"maxSampleGapSeconds": 86400, "maxSampleGapFrom": "2000-01-01T00:00:00Z"},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    for step in range(3):
        gpus = []
        for index, (model, user) in enumerate(users.items()):
            one = gpu(index, util=70, state="active", procs=[proc(user)])
            one["name"] = model
            one["uuid"] = f"GPU-{index}-{tenant.slug}"
            gpus.append(one)
        body = observation(start + timedelta(hours=step), gpus)
        r = await push(client, host["agentToken"], body)
        assert r.status_code == 202, r.text


# ---- report parameters ----------------------------------------------------------------

ACCEPTED_BOUNDS = [
    # offsets at the ends of the real range, minutes spelled or not, a space for T
    ("2026-11-01T14:00:00%2B14:00", "2026-11-02T00:00:00Z"),
    ("2026-11-01T00:00:00-12:00", "2026-11-03T00:00:00Z"),
    ("2026-11-01T06%2B01", "2026-11-02T00Z"),
    ("2026-11-01 06:00:00Z", "2026-11-02T00:00:00.000000Z"),
    ("2026-11-01T07:00:00 01:00", "2026-11-02"),  # an unencoded +
    ("2026-11-01T06:00:00-00:00", "2026-11-02"),
]
REFUSED_BOUNDS = [
    "2026-W44-7",  # ISO week date
    "2026-305",  # ordinal date
    "20261101",  # basic format
    "2026-11-01T24:00:00Z",
    "2026-11-01T23:59:60Z",  # a leap second
    "2026-11-01T06:00:00%2B24:00",
    "2026-11-01T06:00:00%2B14:60",  # was read as +15:00
    "2026-11-01T06:00:00-00:60",  # was read as -01:00
    "2026-11-01T06:00:00%2B2400",
    "2026-11-01T06:00:00%2B05:30",  # whole minutes, not on a UTC hour
    "2026-11-01T06:00:00.5Z",
    "2026-11-01T%D9%A0%D9%A6:00:00Z",  # Arabic-Indic hour
    "%EF%BC%92026-11-01",  # one full-width digit
    "2026-11-01T06:00:00Z%00",
    "2026-11-01T06:00:00ZZ",
    "2026-11-01TT06:00:00Z",
    "%2B2026-11-01",
    "2026-11-01T06:00:00%2B01:00:00",  # an offset with seconds
]


async def test_odd_iso_forms_answer_or_are_refused_with_a_sentence(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "iso")
    for start, end in ACCEPTED_BOUNDS:
        for path in REPORTS:
            r = await client.get(
                f"{base(tenant)}/{path}?from={start}&to={end}&tz=UTC", headers=tenant.auth()
            )
            assert r.status_code == 200, (path, start, end, r.text[:300])
    for bad in REFUSED_BOUNDS:
        for path in REPORTS:
            for side in (f"from={bad}&to=2026-11-03", f"from=2026-10-30&to={bad}"):
                r = await client.get(f"{base(tenant)}/{path}?{side}", headers=tenant.auth())
                refused(r, 400, 422)


ZONE_WINDOWS = [
    # (tz, from, to): DST gaps and folds, zones that changed offset or skipped a day
    ("America/New_York", "2026-03-08", "2026-03-09"),  # a 23-hour day
    ("America/New_York", "2026-11-01", "2026-11-02"),  # a 25-hour day
    ("America/New_York", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z"),  # the fold
    ("America/Santiago", "2026-09-06", "2026-09-07"),  # DST starts at midnight
    ("America/Santiago", "2026-04-04", "2026-04-06"),  # DST ends at midnight
    ("America/Havana", "2026-03-08", "2026-03-09"),
    ("Pacific/Apia", "2011-12-29", "2012-01-01"),  # 2011-12-30 never happened there
    ("Europe/Moscow", "2014-10-25", "2014-10-27"),  # +04 to +03 for good
    ("Pacific/Kiritimati", "2026-11-01", "2026-11-02"),  # +14
    ("Etc/GMT%2B12", "2026-11-01", "2026-11-02"),  # -12
    ("Africa/Casablanca", "2026-02-14", "2026-03-30"),  # Ramadan: the offset changes twice
]
HALF_HOUR_WINDOWS = [
    ("Australia/Lord_Howe", "2026-04-04T00:00:00Z", "2026-04-06T00:00:00Z"),  # 30-min DST
    ("Asia/Kathmandu", "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"),
    ("America/St_Johns", "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"),
    ("Africa/Monrovia", "1971-06-01T00:00:00Z", "1972-06-01T00:00:00Z"),  # -00:44:30 till 1972
]
DAYS = ("groupBy=day", "groupBy=user,day", "groupBy=team,day", "bucket=day", "")


async def test_zones_that_change_offset_in_the_window(app: Any, client: httpx.AsyncClient) -> None:
    """Every day grouping in a zone at a DST gap or fold, one that skipped a day or moved
    for good: a 200; where midnight is not on a UTC hour too, and the answer says how its
    days were cut."""
    tenant = await quick_tenant(app, "zones")
    at = (datetime.now(UTC) - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    await held_hours(client, tenant, at, {"NVIDIA A100": "alice"})
    recent = (at.date().isoformat(), (at + timedelta(days=2)).date().isoformat())
    for zone, start, end in [*ZONE_WINDOWS, ("America/New_York", *recent)]:
        for path in ("reports/usage", "reports/utilization"):
            for extra in DAYS:
                if ("bucket" in extra) != path.endswith("utilization") and extra:
                    continue
                for fmt in ("json", "csv"):
                    url = f"{base(tenant)}/{path}?from={start}&to={end}&tz={zone}&format={fmt}"
                    r = await client.get(f"{url}&{extra}", headers=tenant.auth())
                    assert r.status_code == 200, (zone, path, extra, r.text[:300])
        r = await client.get(
            f"{base(tenant)}/reports/focus?from={start}&to={end}&tz={zone}", headers=tenant.auth()
        )
        assert r.status_code == 200, (zone, r.text[:300])
    for zone, start, end in HALF_HOUR_WINDOWS:
        for path, extra in (
            ("reports/usage", "groupBy=day"),
            ("reports/usage", "groupBy=team,day"),
            ("reports/utilization", "bucket=day"),
            ("reports/focus", ""),
        ):
            url = f"{base(tenant)}/{path}?from={start}&to={end}&tz={zone}&{extra}"
            r = await client.get(url, headers=tenant.auth())
            assert r.status_code == 200, (zone, path, extra, r.text[:300])
            if path != "reports/focus":
                assert "start on it" in r.json()["hourAlignment"], r.text[:300]
        url = f"{base(tenant)}/reports/usage?from={start}&to={end}&tz={zone}&groupBy=user"
        assert (await client.get(url, headers=tenant.auth())).status_code == 200


# ---- prices -----------------------------------------------------------------------------


def price_body(per_hour: str, model: str = '"*"', currency: str = '"EUR"') -> bytes:
    return (
        f'{{"currency": {currency}, "prices": [{{"gpuModel": {model}, '
        f'"perGpuHour": {per_hour}, "from": "2030-01-01"}}]}}'
    ).encode()


PRICES_REFUSED = [
    price_body("1e-30"),
    price_body("1e30"),
    price_body('"1e30"'),
    price_body('"-1e-30"'),
    price_body('"Infinity"'),
    price_body('"sNaN"'),
    price_body('"-NaN"'),
    price_body("true"),
    price_body("null"),
    price_body('""'),
    price_body('" "'),
    price_body('"1,5"'),
    price_body('"\\u0661"'),  # an Arabic-Indic one: was stored as 1
    price_body('"\\uff11"'),  # a full-width one: was stored as 1
    price_body('"1_0"'),  # was stored as 10
    price_body('"\\u00a01"'),
    price_body('"1\\n"'),
    price_body("[1]"),
    price_body("1", model='"\\ud800"'),  # a lone surrogate
    price_body("1", model='"\\udfff\\ud800"'),
    price_body("1", model='""'),
    price_body("1", model='"a\\u0000b"'),
    price_body("1", model='"a\\nb"'),
    price_body("1", model='"' + "m" * 101 + '"'),
    price_body("1", model="null"),
    price_body("1", model="42"),
    price_body("1", currency='"Eur"'),
    price_body("1", currency='"EURO"'),
    price_body("1", currency='"\\uff25\\uff35\\uff32"'),  # full-width EUR
    price_body("1", currency='"EUR "'),
    price_body("1", currency='"\\ud800"'),
    price_body("1", currency='"XXX"'),
    price_body("1", currency="null"),
    b'{"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": "2030-02-30"}]}',
    b'{"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": "2030-W01-1"}]}',
    b'{"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": ""}]}',
    b'{"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1}]}',
    b'{"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": "2030-01-01",'
    b' "until": "2029-01-01"}]}',
    b'{"currency": "EUR", "prices": {"gpuModel": "*"}}',
    b'{"currency": "EUR", "prices": null}',
    b'{"currency": "EUR"}',
    b"[]",
    b"",
    b"{",
    b'{"currency": "EUR", "prices": []}' + b" " * 10 + b"x",
    # the same (model, day) twice, reversed in the list
    b'{"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 2, "from": "2030-01-01"},'
    b' {"gpuModel": "*", "perGpuHour": 1, "from": "2030-01-01"}]}',
]


async def test_odd_prices_and_currencies_are_refused_and_change_nothing(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "prices")
    url = f"{base(tenant)}/prices"
    for body in PRICES_REFUSED:
        r = await client.put(url, content=body, headers={**tenant.auth(), **JSON})
        assert 400 <= r.status_code < 500, (body, r.text)
        refused(r, 400, 422)
    shown = (await client.get(url, headers=tenant.auth())).json()
    assert shown["currency"] is None, shown
    assert shown["prices"] == [], shown


async def test_odd_but_fine_prices_are_stored_as_the_number_they_are(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "prices")
    url = f"{base(tenant)}/prices"
    for sent, shown in (
        ('"-0"', 0.0),
        ("-0", 0.0),
        ("-0.0", 0.0),
        ("0.000001", 1e-06),
        ('"1000000.000000"', 1e6),
        ("1E+2", 100.0),
        ('"  2.5  "', 2.5),
    ):
        r = await client.put(url, content=price_body(sent), headers={**tenant.auth(), **JSON})
        if r.status_code == 422:
            refused(r, 422)
            continue
        assert r.status_code == 200, (sent, r.text)
        price = r.json()["prices"][0]["perGpuHour"]
        assert price == shown, (sent, r.text)
        assert str(price) != "-0.0", (sent, r.text)


async def test_cost_totals_are_exact_decimal_sums(app: Any, client: httpx.AsyncClient) -> None:
    """0.1 + 0.2 per GPU-hour, two hours each, and a third model at 1e-6: the total is
    the exact sum of the rows' exact figures, rounded once."""
    tenant = await quick_tenant(app, "sums")
    start = (datetime.now(UTC) - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    models = {"GPU A": "alice", "GPU B": "bob", "GPU C": "carol"}
    await held_hours(client, tenant, start, models)
    day = (start - timedelta(days=5)).date().isoformat()
    body = {
        "currency": "KWD",
        "prices": [
            {"gpuModel": "GPU A", "perGpuHour": "0.1", "from": day},
            {"gpuModel": "GPU B", "perGpuHour": 0.2, "from": day},
            {"gpuModel": "GPU C", "perGpuHour": "0.000001", "from": day},
            {"gpuModel": "*", "perGpuHour": "999999.999999", "from": day},
        ],
    }
    r = await client.put(f"{base(tenant)}/prices", json=body, headers=tenant.auth())
    assert r.status_code == 200, r.text
    end = start + timedelta(hours=3)
    window = f"from={start:%Y-%m-%dT%H:00:00Z}&to={end:%Y-%m-%dT%H:00:00Z}"
    for group in ("user", "gpu", "team", "user,gpu", "team,user"):
        got = (
            await client.get(
                f"{base(tenant)}/reports/usage?{window}&groupBy={group}", headers=tenant.auth()
            )
        ).json()
        costs = {r.get("user", r.get("gpuName")): r["cost"] for r in got["rows"]}
        if group in ("user", "gpu", "user,gpu"):
            assert sorted(costs.values()) == [0.0, 0.2, 0.4], (group, got)
        assert got["totals"]["cost"] == 0.6, (group, got)
        assert got["totals"]["currency"] == "KWD", got
        text = (
            await client.get(
                f"{base(tenant)}/reports/usage?{window}&groupBy={group}&format=csv",
                headers=tenant.auth(),
            )
        ).text
        cells = [Decimal(row["cost"]) for row in csv.DictReader(io.StringIO(text))]
        assert sum(cells) == Decimal("0.6"), (group, text)
    focus = await client.get(f"{base(tenant)}/reports/focus?{window}&tz=UTC", headers=tenant.auth())
    rows = list(csv.DictReader(io.StringIO(focus.text)))
    assert sorted(r["BilledCost"] for r in rows) == ["0.000", "0.200", "0.400"], focus.text
    assert all("e" not in r["PricingQuantity"].lower() for r in rows), focus.text


# ---- CSV cells from every name a host or admin chooses ---------------------------------

EVIL_NAMES = ("=1+1", "+1", "-1", "@SUM(A1)", "\uff1d1+1", "\uff20x", "\uff0b1", "\uff0d1")


def live_formulas(text: str) -> list[str]:
    cells = [c for row in csv.reader(io.StringIO(text, newline="")) for c in row]
    return [c for c in cells if c.startswith(FORMULA_STARTS)]


async def test_focus_statement_and_team_csv_cells_never_run(
    app: Any, client: httpx.AsyncClient
) -> None:
    """The workspace's name (FOCUS's account, provider and issuer), team names (an
    admin's free text), GPU models and host names (what hosts report) in every money CSV."""
    from board.workspaces import service as workspaces
    from tests.web.helpers import sign_in

    slug = f"evilmoney-{datetime.now(UTC):%H%M%S%f}"
    async with app.state.runtime.sessions() as session:
        workspace = await workspaces.create_workspace(session, slug, "=HYPERLINK(1)")
        admin = await workspaces.add_member(
            session, workspace, f"admin@{slug}.example", "admin", "correct-horse-battery"
        )
        await session.commit()
    tenant = Tenant(slug, admin.api_token, admin.api_token, admin.api_token)
    start = (datetime.now(UTC) - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    users = {name: f"user{i}" for i, name in enumerate(EVIL_NAMES)}
    await held_hours(client, tenant, start, users)
    for i, name in enumerate(EVIL_NAMES):
        r = await client.put(
            f"{base(tenant)}/directory/user{i}",
            json={"memberEmail": None, "team": name},
            headers=tenant.auth(),
        )
        assert r.status_code == 200, r.text
    day = (start - timedelta(days=5)).date().isoformat()
    prices = [{"gpuModel": name, "perGpuHour": 1, "from": day} for name in EVIL_NAMES]
    r = await client.put(
        f"{base(tenant)}/prices", json={"currency": "EUR", "prices": prices}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    window = f"from={start:%Y-%m-%d}&to={start + timedelta(days=1):%Y-%m-%d}&tz=UTC"
    focus = await client.get(f"{base(tenant)}/reports/focus?{window}", headers=tenant.auth())
    assert focus.status_code == 200, focus.text
    rows = list(csv.DictReader(io.StringIO(focus.text, newline="")))
    assert len(rows) == len(EVIL_NAMES), focus.text
    assert {r["BillingAccountName"] for r in rows} == {"'=HYPERLINK(1)"}, focus.text
    assert not live_formulas(focus.text), live_formulas(focus.text)
    for group in ("team", "team,user", "team,gpu", "gpu,team", "team,host", "team,day"):
        r = await client.get(
            f"{base(tenant)}/reports/usage?{window}&groupBy={group}&format=csv",
            headers=tenant.auth(),
        )
        assert r.status_code == 200, (group, r.text)
        assert not live_formulas(r.text), (group, live_formulas(r.text))
    assert (await sign_in(client, f"admin@{slug}.example", "correct-horse-battery")).status_code
    month = f"{start:%Y-%m}"
    for name in EVIL_NAMES:
        r = await client.get(f"/w/{slug}/statements.csv", params={"month": month, "team": name})
        assert r.status_code == 200, (name, r.text[:300])
        assert "user" in r.text, (name, r.text)
        assert not live_formulas(r.text), (name, live_formulas(r.text))


# ---- report slots on the served board ---------------------------------------------------

SLOT_REPORTS = (
    "reports/usage?from=2026-01-01&to=2026-12-31&groupBy=user,day&format=csv",
    "reports/utilization?from=2026-01-01&to=2026-12-31&groupBy=gpu&bucket=hour",
    "reports/focus?from=2026-01-01&to=2026-12-31",
)


def _held_slots(url: str, workspace: int) -> int:
    keys = [SLOT_LOCK_BASE + slot for slot in range(REPORT_SLOTS)]
    found = db(
        url,
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
        "AND classid::bigint = ANY(%s) AND objid::bigint = %s",
        keys,
        workspace & 0x7FFFFFFF,
    )
    return int(str(found))


def _ask_and_go(board: LiveBoard, token: str, path: str, read_head: bool) -> None:
    """A raw request for a report, then a reset (SO_LINGER 0): after the answer's head,
    or before anything came back."""
    sock = socket.create_connection(("127.0.0.1", board.port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    try:
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: board.test\r\nAuthorization: Bearer {token}\r\n"
            "Accept-Encoding: gzip\r\n\r\n".encode()
        )
        if read_head:
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = sock.recv(1024)
                assert chunk, got
                got += chunk
            assert got.startswith(b"HTTP/1.1 200 "), got[:200]
    finally:
        sock.close()


def test_clients_gone_mid_report_free_their_slots(board: LiveBoard, scratch: SeedTenant) -> None:
    """Every slot taken by a client that went away (after the head, or before it) is
    free again, and the workspace's reports answer."""
    url = board.env["GUA_BOARD_DATABASE_URL"]
    workspace = int(str(db(url, "SELECT id FROM workspaces WHERE slug = %s", scratch.slug)))
    token = scratch.finance.token
    for read_head in (True, False):
        for path in SLOT_REPORTS:
            for _ in range(REPORT_SLOTS + 1):
                _ask_and_go(board, token, f"/api/v1/workspaces/{scratch.slug}/{path}", read_head)
        deadline = time.monotonic() + 60
        while _held_slots(url, workspace):
            assert time.monotonic() < deadline, "a gone client's report kept its slot"
            time.sleep(0.1)
    # Waits for handlers that began after the client went, too: each must end.
    with board.client(token) as c:
        for path in SLOT_REPORTS:
            deadline = time.monotonic() + 60
            while True:
                reply = board.call(c, "GET", f"/api/v1/workspaces/{scratch.slug}/{path}")
                if reply.status_code == 200:
                    break
                assert reply.status_code == 429, reply
                assert time.monotonic() < deadline, f"slots still taken: {reply}"
                time.sleep(0.5)


ODD_ZONES = (
    "right/UTC",
    "right/America/New_York",
    "posix/Europe/Berlin",
    "Factory",
    "localtime",
    "posixrules",
    "EST5EDT",
    "Etc/GMT-14",
    "Etc/GMT%2B12",
    "GMT%2B0",
    "NZ-CHAT",  # +12:45
    "leapseconds",
    "tzdata.zi",
    "right",
    "UTC%20",
    "%20UTC",
    "utc",
    "Europe//Berlin",
    "Europe/./Berlin",
    "./UTC",
)


async def test_odd_zone_names_in_every_report_and_setting(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Names the zone database holds that are no plain zone, or that PostgreSQL may not
    know: an answer or a 4xx with a sentence, in the reports and as the workspace's zone
    (FOCUS's default, statements, prices' dates)."""
    from tests.web.helpers import sign_in

    slug = f"oddzone-{datetime.now(UTC):%H%M%S%f}"
    from board.workspaces import service as workspaces

    async with app.state.runtime.sessions() as session:
        workspace = await workspaces.create_workspace(session, slug, slug)
        admin = await workspaces.add_member(
            session, workspace, f"admin@{slug}.example", "admin", "correct-horse-battery"
        )
        await session.commit()
    tenant = Tenant(slug, admin.api_token, admin.api_token, admin.api_token)
    start = (datetime.now(UTC) - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    await held_hours(client, tenant, start, {"NVIDIA A100": "alice"})
    window = f"from={start:%Y-%m-%dT%H:00:00Z}&to={start + timedelta(hours=3):%Y-%m-%dT%H:00:00Z}"
    dates = f"from={start:%Y-%m-%d}&to={start + timedelta(days=1):%Y-%m-%d}"
    assert (await sign_in(client, f"admin@{slug}.example", "correct-horse-battery")).status_code
    for zone in ODD_ZONES:
        for path, extra in (
            ("reports/usage", "groupBy=user,day"),
            ("reports/usage", "groupBy=team&format=csv"),
            ("reports/utilization", "bucket=day&groupBy=gpu"),
            ("reports/utilization", "bucket=hour&format=csv"),
            ("reports/focus", ""),
        ):
            for bounds in (window, dates):
                r = await client.get(
                    f"{base(tenant)}/{path}?{bounds}&tz={zone}&{extra}", headers=tenant.auth()
                )
                if r.status_code != 200:
                    refused(r, 400, 422)
        r = await client.patch(
            f"{base(tenant)}/settings",
            content=f'{{"timezone": "{zone.replace("%20", " ").replace("%2B", "+")}"}}',
            headers={**tenant.auth(), **JSON},
        )
        if r.status_code != 200:
            refused(r, 400, 422)
            continue
        body = {
            "currency": "EUR",
            "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": f"{start:%Y-%m-%d}"}],
        }
        r = await client.put(f"{base(tenant)}/prices", json=body, headers=tenant.auth())
        if r.status_code != 200:
            refused(r, 400, 409, 422)
        for url in (
            f"{base(tenant)}/reports/focus?{window}",
            f"{base(tenant)}/prices",
            f"/w/{slug}/statements",
            f"/w/{slug}/statements.csv?unassigned=1",
            f"/w/{slug}/usage",
        ):
            r = await client.get(url, headers=tenant.auth() if "/api/" in url else {})
            assert r.status_code < 500, (zone, url, r.text[:300])


# ---- the past is never rewritten, whatever the zone does later -------------------------


async def test_a_price_in_force_stays_fixed_when_the_zone_moves_back(
    app: Any, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A price from today in Kiritimati (UTC+14) began hours ago. Moving the workspace
    to UTC-12, where that date is still ahead, made it "future" again: GET said
    fixed false, and a PUT replaced or deleted a price costs were already computed with.
    Without a correction window a begun price is fixed at once, as it was then; with
    one, the window is judged by the same stored instant."""
    monkeypatch.setattr(app.state.runtime.settings, "price_correction_days", 0)
    tenant = await quick_tenant(app, "zonemove")
    settings = f"{base(tenant)}/settings"
    url = f"{base(tenant)}/prices"
    r = await client.patch(settings, json={"timezone": "Pacific/Kiritimati"}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    today = datetime.now(ZoneInfo("Pacific/Kiritimati")).date().isoformat()
    one = {"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": "1.5", "from": today}]}
    r = await client.put(url, json=one, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert r.json()["prices"][0]["fixed"] is True, r.text
    began = r.json()["prices"][0]["startsAt"]
    r = await client.patch(settings, json={"timezone": "Etc/GMT+12"}, headers=tenant.auth())
    assert r.status_code == 200, r.text

    shown = (await client.get(url, headers=tenant.auth())).json()
    assert [(p["from"], p["startsAt"], p["fixed"]) for p in shown["prices"]] == [
        (today, began, True)
    ], shown
    changed = {"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 9, "from": today}]}
    detail = refused(await client.put(url, json=changed, headers=tenant.auth()), 409)
    assert "cannot change" in detail, detail
    # Sent again unchanged, or left out: kept either way.
    for body in (one, {"currency": "EUR", "prices": []}):
        r = await client.put(url, json=body, headers=tenant.auth())
        assert r.status_code == 200, r.text
        assert [(p["from"], p["perGpuHour"]) for p in r.json()["prices"]] == [(today, 1.5)]
    # A price from tomorrow in the new zone is still the future's to set.
    later = (datetime.now(ZoneInfo("Etc/GMT+12")).date() + timedelta(days=3)).isoformat()
    both = {"currency": "EUR", "prices": [*one["prices"], {**one["prices"][0], "from": later}]}
    r = await client.put(url, json=both, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert [p["fixed"] for p in r.json()["prices"]] == [True, False], r.text


async def test_a_price_not_begun_keeps_its_instant_when_the_zone_moves_ahead(
    app: Any, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From UTC-12 to UTC+14: a price from tomorrow (UTC-12) is dated today or earlier in
    the new zone but has not begun. Sent again unchanged it keeps its stored instant
    (never one in the past); changed it is a 409 (a new price dated back, once another
    is fixed: here without a correction window); left out it goes."""
    monkeypatch.setattr(app.state.runtime.settings, "price_correction_days", 0)
    tenant = await quick_tenant(app, "zoneahead")
    settings = f"{base(tenant)}/settings"
    url = f"{base(tenant)}/prices"
    r = await client.patch(settings, json={"timezone": "Etc/GMT+12"}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    soon = (datetime.now(ZoneInfo("Etc/GMT+12")).date() + timedelta(days=1)).isoformat()
    prices = [
        {"gpuModel": "*", "perGpuHour": 1, "from": "2026-01-01"},
        {"gpuModel": "*", "perGpuHour": 2, "from": soon},
    ]
    r = await client.put(url, json={"currency": "EUR", "prices": prices}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    began = r.json()["prices"][1]["startsAt"]
    r = await client.patch(settings, json={"timezone": "Pacific/Kiritimati"}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    shown = (await client.get(url, headers=tenant.auth())).json()["prices"]
    assert [(p["from"], p["startsAt"], p["fixed"]) for p in shown][1] == (soon, began, False)
    r = await client.put(url, json={"currency": "EUR", "prices": prices}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert [(p["startsAt"], p["fixed"]) for p in r.json()["prices"]][1] == (began, False)
    changed = [prices[0], {**prices[1], "perGpuHour": 3}]
    r = await client.put(url, json={"currency": "EUR", "prices": changed}, headers=tenant.auth())
    assert "and that has begun" in refused(r, 409)
    r = await client.put(
        url, json={"currency": "EUR", "prices": [prices[0]]}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    assert [p["from"] for p in r.json()["prices"]] == ["2026-01-01"], r.text


async def test_statement_months_in_other_digits_are_refused(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 200 for 2026-11: the month was matched with Unicode digits, as no other
    date parameter of the board is."""
    from tests.board.builders import make_tenant
    from tests.web.helpers import sign_in

    slug = f"months-{datetime.now(UTC):%H%M%S%f}"
    await make_tenant(app, slug)
    r = await sign_in(client, f"admin@{slug}.example", "correct-horse-battery")
    assert r.status_code == 303, r.text
    for path in ("statements", "statements.csv"):
        ok = await client.get(f"/w/{slug}/{path}", params={"month": "2026-11", "unassigned": "1"})
        assert ok.status_code == 200, ok.text[:300]
        for month in (
            "\u0662\u0660\u0662\u0666-\u0661\u0661",  # Arabic-Indic
            "\uff12\uff10\uff12\uff16-11",  # full-width
            "2026-\u0967\u0967",  # Devanagari
            "2026-11-01",
            "2026-13",
            "1999-12",
            "2026-1",
            "2026/11",
            "x" * 10_000,
        ):
            r = await client.get(f"/w/{slug}/{path}", params={"month": month, "unassigned": "1"})
            assert r.status_code == 422, (path, month, r.status_code, r.text[:300])


# ---- kept utilization bodies ------------------------------------------------------------

MANY_ZONES = (
    "Europe/Berlin",
    "Asia/Tokyo",
    "America/New_York",
    "Europe/Paris",
    "Asia/Dubai",
    "Etc/GMT-3",
)


async def test_kept_bodies_do_not_grow_with_every_zone_a_reader_names(
    app: Any, client: httpx.AsyncClient, database_url: str
) -> None:
    """Utilization bodies are kept per report kind, zone included: a finance script
    cycling through the zone database stored a copy of the history per name (~600
    names, and again under posix/ and right/). Now UTC, the workspace's zone and at most
    MAX_OTHER_ZONES others."""
    import psycopg

    from board.db.urls import libpq_url
    from board.rollups.daily import refresh_day_rollups

    tenant = await quick_tenant(app, "kept")
    start = (datetime.now(UTC) - timedelta(days=3)).replace(
        hour=5, minute=0, second=0, microsecond=0
    )
    await held_hours(client, tenant, start, {"NVIDIA A100": "alice", "NVIDIA H100": "bob"})
    async with await psycopg.AsyncConnection.connect(
        libpq_url(database_url), autocommit=True
    ) as conn:
        await refresh_day_rollups(conn)
    r = await client.patch(
        f"{base(tenant)}/settings", json={"timezone": "Africa/Lagos"}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    window = f"from={start:%Y-%m-%d}T00:00:00Z&to={start + timedelta(days=2):%Y-%m-%d}T00:00:00Z"
    for zone in ("UTC", "Africa/Lagos", *MANY_ZONES):
        for bucket in ("hour", "day"):
            url = f"{base(tenant)}/reports/utilization?{window}&groupBy=gpu&bucket={bucket}"
            r = await client.get(f"{url}&tz={zone}", headers=tenant.auth("finance"))
            assert r.status_code == 200, (zone, r.text[:300])
            assert r.json()["rows"], (zone, r.text[:300])
            # Asked again: the same bytes, kept or not.
            again = await client.get(f"{url}&tz={zone}", headers=tenant.auth("finance"))
            assert again.content == r.content, zone
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as conn:
        cur = await conn.execute(
            "SELECT DISTINCT split_part(b.report, ':', 5) FROM report_bodies b "
            "JOIN workspaces w ON w.id = b.workspace_id WHERE w.slug = %s",
            [tenant.slug],
        )
        zones = {row[0] for row in await cur.fetchall()}
    assert {"UTC", "Africa/Lagos"} <= zones, zones
    assert len(zones - {"UTC", "Africa/Lagos"}) <= MAX_OTHER_ZONES, zones


@pytest.fixture(scope="module")
def big(board: LiveBoard) -> SeedTenant:
    """A workspace whose month of hourly per-GPU utilization is ~14 MB of JSON: 64 GPUs
    observed once a day (a day-long sample gap, so every hour is covered)."""
    tenant = make_tenant(board, "delta")
    host = seed_enroll(board, tenant, "delta-node")
    with board.client(tenant.admin.token) as c:
        reply = board.call(
            c,
            "PATCH",
            f"/api/v1/workspaces/{tenant.slug}/settings",
            json={"maxSampleGapSeconds": 86400, "maxSampleGapFrom": "2000-01-01T00:00:00Z"},
        )
        assert reply.status_code == 200, reply
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    uuids = tuple(f"GPU-delta-{i:02d}" for i in range(64))
    for days in range(30, -1, -1):
        body = seed_observation(now - timedelta(days=days), gpu_uuids=uuids)
        reply = seed_push(board, host, body)
        assert reply.status_code == 202, reply
    return tenant


def test_readers_stalled_mid_body_hold_their_slots_until_they_go(
    board: LiveBoard, big: SeedTenant, scratch: SeedTenant
) -> None:
    """Three clients read a large report's head and then nothing: the reports stay
    mid-body (documented: a client that never reads holds its handler), so a fourth
    is a 429 with Retry-After and a detail (another workspace's is not). Once they
    reset their connections, every slot is free and the workspace's reports answer."""
    url = board.env["GUA_BOARD_DATABASE_URL"]
    workspace = int(str(db(url, "SELECT id FROM workspaces WHERE slug = %s", big.slug)))
    today = datetime.now(UTC).date()
    path = (
        f"/api/v1/workspaces/{big.slug}/reports/utilization?from={today - timedelta(days=31)}"
        f"&to={today + timedelta(days=1)}&groupBy=gpu&bucket=hour"
    )
    stalled = []
    try:
        for _ in range(REPORT_SLOTS):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(30)
            sock.connect(("127.0.0.1", board.port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            stalled.append(sock)
            sock.sendall(
                f"GET {path} HTTP/1.1\r\nHost: board.test\r\n"
                f"Authorization: Bearer {big.finance.token}\r\n\r\n".encode()
            )
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = sock.recv(1024)
                assert chunk, got
                got += chunk
            assert got.startswith(b"HTTP/1.1 200 "), got[:200]
        deadline = time.monotonic() + 30
        while _held_slots(url, workspace) < REPORT_SLOTS:
            assert time.monotonic() < deadline, "the stalled reports ended on their own"
            time.sleep(0.1)
        with board.client(big.finance.token) as c:
            reply = board.call(c, "GET", path)
        assert reply.status_code == 429, reply
        assert int(reply.headers["Retry-After"]) > 0, reply
        assert "reports running" in reply.detail(), reply
        # Another workspace's reports are not limited by these.
        with board.client(scratch.finance.token) as c:
            other = board.call(c, "GET", path.replace(big.slug, scratch.slug))
        assert other.status_code == 200, other
    finally:
        for sock in stalled:
            sock.close()
    deadline = time.monotonic() + 60
    while _held_slots(url, workspace):
        assert time.monotonic() < deadline, "a reset client's report kept its slot"
        time.sleep(0.1)
    with board.client(big.finance.token) as c:
        reply = board.call(c, "GET", path.replace("bucket=hour", "bucket=day"))
    assert reply.status_code == 200, reply
    assert len(reply.json()["rows"]) >= 64 * 30, len(reply.json()["rows"])


NOT_IANA_ZONES = (
    "right/Europe/Berlin",
    "right/UTC",
    "posix/Europe/Berlin",
    "localtime",
    "posixrules",
    "right",
)


async def test_zone_folder_copies_are_no_report_zone(app: Any, client: httpx.AsyncClient) -> None:
    """Were a 200: right/Europe/Berlin is +02:00 in December to Python (its dates, labels
    and day bounds) but 01:59:33 to PostgreSQL (its day keys); posix/... and localtime
    (whatever the server's /etc/localtime is) are no IANA zone either, as the workspace
    setting already says."""
    tenant = await quick_tenant(app, "notiana")
    for zone in NOT_IANA_ZONES:
        for path in REPORTS:
            for bounds in (
                "from=2026-12-01&to=2026-12-02",
                "from=2026-12-01T00:00:00Z&to=2026-12-02T00:00:00Z",
            ):
                url = f"{base(tenant)}/{path}?{bounds}&tz={zone}"
                r = await client.get(url, headers=tenant.auth())
                assert "IANA" in refused(r, 422), (zone, path)
