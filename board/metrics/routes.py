"""GET /metrics: Prometheus text, for the operator's scraper only.

Who may scrape: with GUA_BOARD_METRICS_TOKEN set, whoever sends it as a bearer token;
without it, only clients on a loopback or private address (the address uvicorn sees,
which is the client's own behind a trusted proxy that forwards it), so a board
published to the internet does not publish its metrics by default. The numbers hold
no tenant data either way.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from typing import Any, Protocol

from fastapi import APIRouter, Request, Response
from prometheus_client.core import Metric
from psycopg_pool import AsyncConnectionPool

from board.db.deps import PoolDep
from board.errors import Forbidden, NotFound, Unauthorized
from board.metrics.exposition import CONTENT_TYPE, render
from board.settings import SettingsDep

log = logging.getLogger(__name__)

router = APIRouter(include_in_schema=False)


class ScrapeTimeFamily(Protocol):
    """A metric computed from the database when scraped (hosts by freshness, …): the
    composition root puts the domains' ones on `app.state.scrape_time_families`."""

    async def family(self, pool: AsyncConnectionPool[Any]) -> Metric: ...


# Loopback, RFC 1918, link-local and unique-local: where a scraper inside the operator's
# network comes from. (ipaddress's is_private also counts documentation ranges.)
PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
    )
)


def private_client(host: str | None) -> bool:
    if host is None:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in PRIVATE_NETWORKS)


def check_scraper(request: Request, token: str | None) -> None:
    if token:
        scheme, _, given = (request.headers.get("authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            raise Unauthorized("/metrics needs the metrics bearer token.")
        return
    client = request.client.host if request.client else None
    if not private_client(client):
        raise Forbidden(
            "/metrics answers private addresses only; set GUA_BOARD_METRICS_TOKEN to scrape "
            "it from elsewhere."
        )


@router.get("/metrics")
async def metrics(request: Request, settings: SettingsDep, pool: PoolDep) -> Response:
    if not settings.metrics_enabled:
        raise NotFound("Not Found")
    check_scraper(request, settings.metrics_token)
    # One set per app (and so per database, each with its cache), on the app's state.
    families: list[ScrapeTimeFamily] = getattr(request.app.state, "scrape_time_families", [])
    computed = []
    for scraped in families:
        try:
            computed.append(await scraped.family(pool))
        except Exception as exc:  # the database is slow or away: the rest still scrapes
            log.warning("metrics: could not compute %s (%s)", type(scraped).__name__, exc)
    return Response(render(computed), media_type=CONTENT_TYPE)
