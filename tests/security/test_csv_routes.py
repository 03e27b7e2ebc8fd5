"""Every CSV route of the served board: names chosen by a host never become live
spreadsheet formulas. (The CSV writer's cells and the in-process reports:
tests/board/test_csv_injection.py.)

Host names, Linux users, process and GPU names come from agents. In every CSV the board
writes (the API's reports with each grouping, the usage page's download, and any CSV route
added later, found by discovery), no cell may start with = + - @ TAB or CR; such a cell is
written with a leading ' instead. JSON carries the names unchanged.
"""

from __future__ import annotations

import csv
import io
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.security.routes import discover
from tests.security.seed import Tenant, claim, issue_enrollment, push_history
from tests.support.live import LiveBoard
from tests.support.replies import Reply

EVIL = (
    '=HYPERLINK("http://x","y")',
    "+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(A1)",
    "\tx",
    "\rx",
)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
USAGE_KEYS = ("user", "host", "gpu", "day")
GROUPINGS = [*USAGE_KEYS, *(",".join(p) for p in itertools.permutations(USAGE_KEYS, 2))]
# For CSV routes found later: any grouping they may know; a 422 just means "not this one".
MORE_GROUPINGS = ("team", "member", "reservation", "model", "host", "gpu", "user", "day")


@dataclass
class Evil:
    tenant: Tenant
    window: dict[str, str]


@pytest.fixture(scope="module")
def evil(board: LiveBoard, scratch: Tenant) -> Evil:
    names = {
        "users": EVIL,
        "process_names": EVIL,
        "gpu_uuids": tuple(f"GPU-evil-{i}" for i in range(len(EVIL))),
        "gpu_names": EVIL,
    }
    for name in EVIL:
        host = claim(board, issue_enrollment(board, scratch), name)
        scratch.hosts.append(host)
        push_history(board, host, **names)
    # A preset display name (the admin's) reaches the reports too.
    named = claim(board, issue_enrollment(board, scratch, "=1+1 preset"), "plain")
    scratch.hosts.append(named)
    push_history(board, named, **names)
    today = datetime.now(UTC).date()
    window = {
        "from": (today - timedelta(days=1)).isoformat(),
        "to": (today + timedelta(days=1)).isoformat(),
    }
    return Evil(scratch, window)


def cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text, newline="")) for cell in row]


def live_formulas(reply: Reply) -> list[str]:
    return [c for c in cells(reply.text) if c.startswith(FORMULA_STARTS)]


def get(board: LiveBoard, token: str, path: str, params: dict[str, Any]) -> Reply:
    with board.client(token) as c:
        return board.call(c, "GET", path, params=params)


def test_usage_csv_every_grouping(board: LiveBoard, evil: Evil) -> None:
    t = evil.tenant
    seen: set[str] = set()
    for group in GROUPINGS:
        reply = get(
            board,
            t.finance.token,
            f"/api/v1/workspaces/{t.slug}/reports/usage",
            {**evil.window, "groupBy": group, "format": "csv"},
        )
        if reply.status_code == 422 and "," in group:
            continue  # a pairing the board does not offer
        assert reply.status_code == 200, reply
        assert reply.headers["content-type"].startswith("text/csv"), reply
        assert not live_formulas(reply), f"groupBy={group}: {live_formulas(reply)}"
        seen.update(cells(reply.text))
    for name in EVIL:
        assert f"'{name}" in seen, f"{name!r} is missing from the usage CSVs"


def test_utilization_csv_every_grouping(board: LiveBoard, evil: Evil) -> None:
    t = evil.tenant
    seen: set[str] = set()
    for group, bucket in itertools.product(("host", "gpu"), ("hour", "day")):
        reply = get(
            board,
            t.finance.token,
            f"/api/v1/workspaces/{t.slug}/reports/utilization",
            {**evil.window, "groupBy": group, "bucket": bucket, "format": "csv"},
        )
        assert reply.status_code == 200, reply
        assert not live_formulas(reply), f"{group}/{bucket}: {live_formulas(reply)}"
        seen.update(cells(reply.text))
    for name in ('=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)"):
        assert f"'{name}" in seen, f"{name!r} is missing from the utilization CSVs"
    assert "'=1+1 preset" in seen


def test_usage_page_download(board: LiveBoard, evil: Evil) -> None:
    t = evil.tenant
    with board.signed_in(t.finance.email, t.finance.password) as c:
        for group in GROUPINGS:
            reply = board.call(
                c, "GET", f"/w/{t.slug}/usage.csv", params={**evil.window, "groupBy": group}
            )
            if reply.status_code == 422 and "," in group:
                continue
            assert reply.status_code == 200, reply
            assert not live_formulas(reply), f"usage.csv groupBy={group}: {live_formulas(reply)}"


def test_every_csv_route_found_is_neutralized(
    board: LiveBoard, evil: Evil, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Any route that writes CSV (a `format` parameter or a .csv path), known or new."""
    t = evil.tenant
    with board.client() as c:
        schema = board.call(c, "GET", "/openapi.json").json()
    endpoints = discover(
        schema, tmp_path_factory.mktemp("csv-routes"), board.env["GUA_BOARD_DATABASE_URL"]
    )
    found = [
        e
        for e in endpoints
        if e.method == "GET"
        and ("format" in e.query or e.path.endswith(".csv") or "focus" in e.path)
    ]
    assert found, "no CSV route was found"
    failures = []
    with board.signed_in(t.admin.email, t.admin.password) as page:
        for endpoint in found:
            path = endpoint.path.replace("{slug}", t.slug)
            client = page if endpoint.is_page else board.client(t.admin.token)
            served = 0
            for group in (None, *MORE_GROUPINGS):
                params = {**evil.window, "format": "csv"}
                if group:
                    params["groupBy"] = group
                reply = board.call(client, "GET", path, params=params)
                if reply.status_code != 200 or "csv" not in reply.headers.get("content-type", ""):
                    continue
                served += 1
                if live_formulas(reply):
                    failures.append(f"{path} groupBy={group}: {live_formulas(reply)[:5]}")
            if client is not page:
                client.close()
            if not served:
                failures.append(f"{path}: no CSV answer to any grouping")
    assert not failures, "\n".join(failures)


def test_json_keeps_the_names_unchanged(board: LiveBoard, evil: Evil) -> None:
    t = evil.tenant
    users = get(
        board,
        t.finance.token,
        f"/api/v1/workspaces/{t.slug}/reports/usage",
        {**evil.window, "groupBy": "user"},
    )
    assert users.status_code == 200, users
    assert set(EVIL) <= {row["user"] for row in users.json()["rows"]}
    gpus = get(
        board,
        t.finance.token,
        f"/api/v1/workspaces/{t.slug}/reports/utilization",
        {**evil.window, "groupBy": "gpu", "bucket": "day"},
    )
    assert gpus.status_code == 200, gpus
    assert set(EVIL) <= {row["gpuName"] for row in gpus.json()["rows"]}
    hosts = get(board, t.admin.token, f"/api/v1/workspaces/{t.slug}/hosts", {})
    names = {h["displayName"] for h in hosts.json()["hosts"]}
    assert {'=HYPERLINK("http://x","y")', "-2+3", "@SUM(A1)", "=1+1 preset"} <= names
