"""Every answer carries the baseline headers, including the errors no route produced."""

from __future__ import annotations

import httpx
import pytest

BASELINE = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
    "cache-control": "no-store",
}


def assert_baseline(r: httpx.Response) -> None:
    for name, value in BASELINE.items():
        assert r.headers.get(name) == value, (r.request.url, name, r.headers.get(name))


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/no/such/route", 404),
        ("GET", "/w/nope/nothing/here", 404),
        ("DELETE", "/healthz", 405),
        ("GET", "/healthz", 200),
        ("GET", "/api/v1/workspaces/nope/hosts", 401),
        ("POST", "/agent/v1/observations", 401),
    ],
)
async def test_answers_without_headers_of_their_own_get_the_baseline(
    client: httpx.AsyncClient, method: str, path: str, status: int
) -> None:
    r = await client.request(method, path)
    assert r.status_code == status, r.text
    assert_baseline(r)
    if status >= 400:
        assert isinstance(r.json()["detail"], str)


async def test_a_pages_own_policy_is_kept(client: httpx.AsyncClient) -> None:
    r = await client.get("/signin")
    assert r.status_code == 200
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers.get_list("content-security-policy") == [r.headers["content-security-policy"]]


async def test_static_files_stay_cacheable(client: httpx.AsyncClient) -> None:
    r = await client.get("/static/board.css")
    assert r.status_code == 200
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "cache-control" not in r.headers
    assert "etag" in r.headers


@pytest.mark.parametrize(
    ("accept_encoding", "accepted"),
    [
        ("gzip", True),
        ("GZIP;q=0.5", True),
        ("br, x-gzip", True),
        ("deflate, gzip;q=1.0", True),
        ("gzip;q=0", False),
        ("gzip; q=0.000", False),
        ("gzip;q=nan", False),
        ("gzip;q=2", False),
        ("notgzip", False),
        ("identity", False),
        ("", False),
        ("*", False),
    ],
)
def test_gzip_is_accepted_by_rfc_9110s_rules(accept_encoding: str, accepted: bool) -> None:
    from board.edge import accepts_gzip

    assert accepts_gzip(accept_encoding) is accepted


async def test_a_page_is_not_gzipped_for_a_client_that_refuses_it(
    client: httpx.AsyncClient,
) -> None:
    packed = await client.get("/signin", headers={"Accept-Encoding": "gzip"})
    assert len(packed.content) > 1024  # over the middleware's minimum size
    assert packed.headers["content-encoding"] == "gzip"
    for refusing in ("gzip;q=0", "notgzip"):
        r = await client.get("/signin", headers={"Accept-Encoding": refusing})
        assert "content-encoding" not in r.headers, refusing
