"""Names hosts report (host names, Linux users, GPU names and UUIDs) reach finance's CSV
files; a spreadsheet must show them as text, never run them as formulas.

Every CSV the board writes (both REST reports in every grouping and bucket, and the usage
page's download) carries each formula kind with a single quote in front, and the JSON of
the same report carries the names exactly as the hosts sent them.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from itertools import permutations
from typing import Any

import httpx
import pytest

from board.reportkit.csv import csv_cells, spreadsheet_text
from tests.board.builders import Tenant, enroll, make_tenant, push
from tests.board.db import execute
from tests.board.money_builders import base, held_hours
from tests.board.reservation_builders import book
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
)
from tests.web.helpers import sign_in

# One of each kind a spreadsheet runs (OWASP's list, plus LF and the full-width forms).
FORMULAS = [
    '=HYPERLINK("http://x","y")',
    "+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(A1)",
    "\tTAB=1+1",
    "\rCR=1+1",
    "\nLF=1+1",
    "\uff1d1+1",  # ＝
    "\uff0bcmd",  # ＋
    "\uff0d2+3",  # －
    "\uff20SUM(A1)",  # ＠
]
HARMLESS = ["bob", "gpu-node-1", "NVIDIA A100", "a=b", "'quoted", "2026-01-01"]
# Written out again rather than imported: the test states the rule on its own.
DANGEROUS = tuple("=+-@\t\r\n\uff1d\uff0b\uff0d\uff20")
# Every key field that is text (gpuIndex is a number the board writes).
TEXT_KEYS = ("user", "hostId", "displayName", "gpuUuid", "gpuName", "day", "bucketStart")
USAGE_GROUPS = ["user", "host", "gpu", "day"] + [
    ",".join(p) for p in permutations(["user", "host", "gpu", "day"], 2)
]


def test_formula_cells_get_a_quote_in_front() -> None:
    for text in FORMULAS:
        assert spreadsheet_text(text) == "'" + text
    for text in ["", *HARMLESS]:
        assert spreadsheet_text(text) == text


def test_figures_and_empty_cells_are_left_alone() -> None:
    # Only text cells are checked: a (never occurring) negative figure stays a number.
    assert csv_cells([-1.5, -2, None, "", "bob", "-x", 0.000001]) == (
        "-1.500000,-2,,,bob,'-x,0.000001"
    )
    # Quoted by the csv module as ever, with the quote mark inside the quotes.
    assert csv_cells(['=HYPERLINK("http://x","y")', "\nLF"]) == (
        '"\'=HYPERLINK(""http://x"",""y"")","\'\nLF"'
    )


async def _fleet(app: Any, client: httpx.AsyncClient) -> tuple[Tenant, str, str]:
    """One host per formula (its name, its GPU's name and UUID, the Linux user on it),
    plus a harmless one; each with one credited minute yesterday. Returns the tenant and
    the report window."""
    tenant = await make_tenant(app, "sheets")
    start = days_ago_midnight(1) + timedelta(hours=5)
    for text in [*FORMULAS, "gpu-node-1"]:
        user = "bob" if text == "gpu-node-1" else text
        host = await enroll(client, tenant, text)
        if host["displayName"] != text:
            # The claim strips white space from a host name; a name stored otherwise (an
            # older board, an edit in the database) must be neutralized all the same.
            assert host["displayName"] == text.strip()
            await execute(
                app,
                "UPDATE hosts SET display_name = %s WHERE public_id = %s",
                text,
                host["hostId"],
            )
        card = gpu(0, util=50, state="active", procs=[proc(user)])
        if text != "gpu-node-1":
            card.update(uuid=text, name=text)
        for at in (start, start + timedelta(minutes=1)):
            r = await push(client, host["agentToken"], observation(at, [card]))
            assert r.status_code == 202, r.text
    window_from = (start - timedelta(hours=5)).date().isoformat()
    window_to = (start + timedelta(days=1)).date().isoformat()
    return tenant, window_from, window_to


def _csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def _assert_neutralized(sent: list[dict[str, str]], json_rows: list[dict[str, Any]]) -> None:
    """Each CSV row is its JSON row, text cells with a quote in front where they would
    start a formula; no cell at all starts like a formula."""
    assert len(sent) == len(json_rows)
    for row in sent:
        for cell in row.values():
            assert not cell.startswith(DANGEROUS), row
    for row, original in zip(sent, json_rows, strict=True):
        assert list(row) == list(original)
        for key in TEXT_KEYS:
            if key in original and original[key] is not None:
                text = original[key]
                expected = "'" + text if text.startswith(DANGEROUS) else text
                assert row[key] == expected, (key, text)


def _names(json_rows: list[dict[str, Any]], key: str) -> set[str]:
    return {row[key] for row in json_rows}


async def _get(client: httpx.AsyncClient, url: str, headers: Any, **query: str) -> httpx.Response:
    r = await client.get(url, params=query, headers=headers)
    assert r.status_code == 200, r.text
    return r


async def test_usage_csv_neutralizes_every_text_key(app: Any, client: httpx.AsyncClient) -> None:
    tenant, start, end = await _fleet(app, client)
    url = f"/api/v1/workspaces/{tenant.slug}/reports/usage"
    every = set(FORMULAS)
    for group in USAGE_GROUPS:
        query = {"from": start, "to": end, "groupBy": group}
        sent = await _get(client, url, tenant.auth("finance"), **query, format="csv")
        assert sent.headers["content-type"].startswith("text/csv")
        as_json = (await _get(client, url, tenant.auth("finance"), **query)).json()["rows"]
        _assert_neutralized(_csv_rows(sent.text), as_json)
        # The JSON carries the names as the hosts sent them, each formula kind included.
        keys = group.split(",")
        if "user" in keys:
            assert _names(as_json, "user") == every | {"bob"}
        if "host" in keys or "gpu" in keys:
            assert _names(as_json, "displayName") == every | {"gpu-node-1"}
        if "gpu" in keys:
            assert _names(as_json, "gpuName") == every | {"NVIDIA A100"}
            assert _names(as_json, "gpuUuid") == every | {"GPU-0"}


@pytest.mark.parametrize("bucket", ["day", "hour"])
@pytest.mark.parametrize("group", ["host", "gpu"])
async def test_utilization_csv_neutralizes_every_text_key(
    app: Any, client: httpx.AsyncClient, group: str, bucket: str
) -> None:
    tenant, start, end = await _fleet(app, client)
    url = f"/api/v1/workspaces/{tenant.slug}/reports/utilization"
    query = {"from": start, "to": end, "groupBy": group, "bucket": bucket}
    sent = await _get(client, url, tenant.auth("member"), **query, format="csv")
    as_json = (await _get(client, url, tenant.auth("member"), **query)).json()["rows"]
    _assert_neutralized(_csv_rows(sent.text), as_json)
    assert _names(as_json, "displayName") == set(FORMULAS) | {"gpu-node-1"}
    if group == "gpu":
        assert _names(as_json, "gpuName") == set(FORMULAS) | {"NVIDIA A100"}
        assert _names(as_json, "gpuUuid") == set(FORMULAS) | {"GPU-0"}
    # The harmless host's cells are written as they are.
    assert any(row["displayName"] == "gpu-node-1" for row in _csv_rows(sent.text))


async def test_usage_page_download_neutralizes_too(app: Any, client: httpx.AsyncClient) -> None:
    tenant, start, end = await _fleet(app, client)
    r = await sign_in(client, f"finance@{tenant.slug}.example")
    assert r.status_code == 303, r.text
    api = f"/api/v1/workspaces/{tenant.slug}/reports/usage"
    for group in ("user", "host", "gpu", "user,gpu"):
        query = {"from": start, "to": end, "groupBy": group, "tz": "UTC"}
        sent = await _get(client, f"/w/{tenant.slug}/usage.csv", None, **query)
        assert sent.headers["content-type"].startswith("text/csv")
        as_json = (await _get(client, api, tenant.auth("finance"), **query)).json()["rows"]
        assert as_json
        _assert_neutralized(_csv_rows(sent.text), as_json)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def formula_cells(text: str) -> list[str]:
    return [c for row in cells(text) for c in row if c.startswith(FORMULA_STARTS)]


async def test_names_admins_choose_never_start_a_formula(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Team names, price labels, member emails and preset host names reach finance's
    CSV and FOCUS files; each such cell starts with a quote, and JSON keeps them as is."""
    tenant = await quick_tenant(app, "sheet")
    base = f"/api/v1/workspaces/{tenant.slug}"
    issued = await client.post(
        f"{base}/enrollment-tokens", json={"displayName": "@SUM(A1);x,y"}, headers=tenant.auth()
    )
    assert issued.status_code == 201, issued.text
    claimed = await client.post(
        "/agent/v1/enrollments/claim",
        json={"enrollmentToken": issued.json()["enrollmentToken"], "hostname": "plain"},
    )
    assert claimed.status_code == 201, claimed.text
    host = claimed.json()
    at = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
    card = gpu(0, util=50, state="active", procs=[proc("alice")])
    card["name"] = "-GPU+1"
    for i in range(2):
        r = await push(client, host["agentToken"], observation(at + timedelta(minutes=i), [card]))
        assert r.status_code == 202, r.text
    team = '=HYPERLINK("http://x","team")'
    r = await client.put(
        f"{base}/directory/alice", json={"memberEmail": None, "team": team}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    r = await client.put(
        f"{base}/prices",
        json={
            "currency": "EUR",
            "prices": [{"gpuModel": "-GPU+1", "perGpuHour": 2, "from": "2026-01-01"}],
        },
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    evil_email = "=cmd@sheet.example"
    r = await client.post(
        f"{base}/members", json={"email": evil_email, "role": "member"}, headers=tenant.auth()
    )
    assert r.status_code == 201, r.text
    await book(client, tenant, host["hostId"], memberEmail=evil_email, note="+note")
    today = datetime.now(UTC).date()
    window = f"from={today - timedelta(days=1)}&to={today + timedelta(days=2)}"
    csv_urls = [
        *(f"reports/usage?groupBy={g}&format=csv" for g in ("team", "team,user", "gpu", "host")),
        "reports/utilization?groupBy=gpu&format=csv",
        "reports/focus?tz=UTC",
        *(
            f"reports/reservations?groupBy={g}&format=csv"
            for g in ("member", "host", "reservation")
        ),
    ]
    seen: set[str] = set()
    for url in csv_urls:
        r = await client.get(f"{base}/{url}&{window}", headers=tenant.auth("finance"))
        assert r.status_code == 200, (url, r.text[:300])
        assert not formula_cells(r.text), (url, formula_cells(r.text))
        disposition = r.headers["content-disposition"]
        assert re.fullmatch(r'attachment; filename="[a-z0-9-]+\.csv"', disposition), disposition
        seen |= {c for row in cells(r.text) for c in row}
    for name in (team, "@SUM(A1);x,y", "-GPU+1", evil_email):
        assert "'" + name in seen, f"{name!r} never reached a CSV"
    r = await client.get(f"{base}/reports/usage?groupBy=team&{window}", headers=tenant.auth())
    assert [row["team"] for row in r.json()["rows"]] == [team], r.text


ALL_FORMULA_STARTS = tuple("=+-@\t\r\n\uff1d\uff0b\uff0d\uff20")


EVIL_NAMES = ("=1+1", "+1", "-1", "@SUM(A1)", "\uff1d1+1", "\uff20x", "\uff0b1", "\uff0d1")


def live_formulas(text: str) -> list[str]:
    cells = [c for row in csv.reader(io.StringIO(text, newline="")) for c in row]
    return [c for c in cells if c.startswith(ALL_FORMULA_STARTS)]


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
