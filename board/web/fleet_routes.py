"""The fleet page, a host's page, and the JSON they refresh themselves from."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import partial
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

from board.auth import web_sessions
from board.auth.deps import member_context
from board.db.connection import report_connection
from board.db.deps import SessionDep
from board.errors import DomainError
from board.fleet import service as fleet_views
from board.fleet.search import MAX_QUERY_CHARS, search_fleet
from board.hosts import service as hosts
from board.hosts.models import Host
from board.reportkit.params import day_now, parse_window, parse_zone
from board.reports import service as reports
from board.reservations.timeline import host_timeline
from board.runtime import Runtime, RuntimeDep
from board.stream.sse import StillAllowed, fleet_sse_response, sse_response
from board.web.deps import MemberPageDep, Page, PageDep
from board.web.find_gpus import FindForm
from board.web.fleet import (
    CARD_STATES,
    CARDS_UP_TO,
    GROUPS,
    SORTS,
    VIEWS,
    Fleet,
    build_fleet,
    host_cards,
)
from board.web.fleet_energy import fleet_energy
from board.web.fleet_health import health_view
from board.web.fleet_people import people
from board.web.fleet_rows import gpu_rows
from board.web.host_charts import DEFAULT_RANGE, host_history
from board.web.render import PageRoute, finish, render, static_url, templates

router = APIRouter(prefix="/w/{slug}", route_class=PageRoute, include_in_schema=False)

REFRESH_SECONDS = 5


def _filters(state: str, host: str) -> tuple[str, str]:
    host = host.strip()
    try:
        # The id as hosts are listed: an upper-case or braced spelling matched no host.
        host = str(uuid.UUID(host)) if host else ""
    except ValueError:
        pass  # no host has it: nothing matches
    return (state if state in CARD_STATES else ""), host


def _fragments(names: dict[str, str], context: dict[str, Any]) -> dict[str, str]:
    return {key: templates.get_template(name).render(context) for key, name in names.items()}


@dataclass(frozen=True)
class FleetQuery:
    """The fleet page's URL parameters; an unknown choice falls back to its default."""

    state: str = ""
    host: str = ""
    q: str = ""
    sort: str = "name"
    group: str = "host"
    view: str = ""

    def params(self, **changes: str) -> str:
        """This query as a URL query string, with `changes`, defaults left out."""
        values = {**self.__dict__, **changes}
        defaults = FleetQuery().__dict__
        shown = {k: v for k, v in values.items() if v and v != defaults[k]}
        return urlencode(shown)


def fleet_query(
    state: str = "",
    host: str = "",
    q: Annotated[str, Query(max_length=MAX_QUERY_CHARS)] = "",
    sort: str = "name",
    group: str = "host",
    view: str = "",
) -> FleetQuery:
    state, host = _filters(state, host)
    return FleetQuery(
        state=state,
        host=host,
        q=q.strip(),
        sort=sort if sort in SORTS else "name",
        group=group if group in GROUPS else "host",
        view=view if view in VIEWS else "",
    )


FleetQueryDep = Annotated[FleetQuery, Depends(fleet_query)]


async def _fleet_context(
    page: Page, db: SessionDep, query: FleetQuery
) -> tuple[dict[str, Any], Fleet]:
    all_hosts = await fleet_views.fleet_hosts(db, page.ctx)
    with_processes = page.ctx.sees_processes
    now = datetime.now(UTC)
    # Durations are rendered with the real clock and carry their stateSince, from which
    # the page's script keeps them current; the refresh's ETag names the minute only.
    minute = now.replace(second=0, microsecond=0)
    shown = search_fleet(all_hosts, query.q, with_processes) if query.q else None
    fleet = build_fleet(
        all_hosts,
        query.state,
        query.host,
        shown=shown,
        group=query.group,
        sort=query.sort,
        now=now,
        with_processes=with_processes,
    )
    shown_gpus = sum(len(h.cards) for h in fleet.hosts)
    view = query.view or ("cards" if fleet.counts["total"] <= CARDS_UP_TO else "rows")
    context = {
        "page": page,
        "fleet": fleet,
        "query": query,
        "view": view,
        "state": query.state,
        "host": query.host,
        "filtered": bool(query.state or query.host or query.q),
        "shown_gpus": shown_gpus,
        "now": minute,
        "host_options": [h.host for h in all_hosts],
        "gpu_rows": gpu_rows,
        "sorts": SORTS,
        "groups": GROUPS,
        "views": VIEWS,
        # Missing and hot GPUs, maintenance windows (board.web.fleet_health); the counts
        # fragment's Retire buttons post with the session's CSRF token.
        "health": await health_view(
            db, page.ctx.workspace_id, page.ctx.workspace.timezone, all_hosts, now
        ),
        "csrf_token": page.person.session.csrf,
        # Watts now, kWh today and its idle-held share (board.web.fleet_energy).
        "energy": await fleet_energy(
            await report_connection(db),
            page.ctx.workspace_id,
            page.ctx.workspace.timezone,
            all_hosts,
            now,
        ),
    }
    return context, fleet


def etag_of(*parts: Any) -> str:
    text = json.dumps(parts, separators=(",", ":"), default=str)
    return '"' + hashlib.sha256(text.encode()).hexdigest()[:32] + '"'


def not_modified(request: Request, etag: str) -> Response | None:
    """304 when the client already has this version (a tab left open all day asks every
    few seconds; unchanged, the answer is a few hundred bytes of headers)."""
    if etag in (request.headers.get("if-none-match") or ""):
        return finish(request, Response(status_code=304, headers={"ETag": etag}))
    return None


@router.get("")
async def fleet_without_slash(request: Request, page: PageDep) -> Response:
    # Relative, unlike Starlette's slash redirect (which names the Host header); a
    # workspace that is not yours is 404 here as on every page.
    return RedirectResponse(f"/w/{page.slug}/", status_code=307)


@router.get("/")
async def fleet_page(
    request: Request, page: PageDep, db: SessionDep, query: FleetQueryDep
) -> Response:
    context, _ = await _fleet_context(page, db, query)
    context.update(nav="fleet", states=CARD_STATES, refresh_seconds=REFRESH_SECONDS)
    context["find"] = FindForm()  # the "Find GPUs" form, empty (board.web.capacity_routes)
    return render(request, "fleet.html", context)


@router.get("/fleet.json")
async def fleet_json(
    request: Request, page: PageDep, db: SessionDep, query: FleetQueryDep
) -> Response:
    context, fleet = await _fleet_context(page, db, query)
    # What the fragments draw: the fleet, the query, the minute, who looks, the release.
    etag = etag_of(
        fleet.fingerprint(),
        context["health"].fingerprint(),
        context["energy"].fingerprint(),
        query.__dict__,
        context["view"],
        context["now"],
        page.ctx.role,
        page.slug,
        static_url(""),
    )
    unchanged = not_modified(request, etag)
    if unchanged is not None:
        return unchanged
    body = {
        "generatedAt": datetime.now(UTC).isoformat(),
        **fleet.as_json(),
        "fragments": _fragments(
            {"counts": "_fleet_counts.html", "hosts": "_fleet_hosts.html"}, context
        ),
    }
    response = finish(request, JSONResponse(body))
    response.headers["ETag"] = etag
    return response


def _week_start(today: date) -> date:
    return today - timedelta(days=today.weekday())


@router.get("/people")
async def people_page(
    request: Request, page: PageDep, db: SessionDep, sort: str = "idle_held"
) -> Response:
    """Each Linux user: GPUs held now, idle-held and since when, GPU-hours this week
    (from the usage report, which reads the rollups, not the raw samples)."""
    sort = sort if sort in ("idle_held", "hours") else "idle_held"
    tz = page.ctx.workspace.timezone
    now = datetime.now(UTC)
    all_hosts = await fleet_views.fleet_hosts(db, page.ctx)
    week_rows: list[dict[str, Any]] = []
    first = tomorrow = None
    if page.ctx.sees_processes:
        _, zone = parse_zone(tz)
        today = day_now(zone)
        first, tomorrow = _week_start(today), today + timedelta(days=1)
        window = parse_window(first.isoformat(), tomorrow.isoformat(), tz)
        report = await reports.usage_report(
            await report_connection(db), page.ctx.workspace_id, window, ("user",)
        )
        week_rows = list(report.rows)
    context = {
        "page": page,
        "nav": "fleet",
        "people": people(all_hosts, week_rows, now, sort) if page.ctx.sees_processes else [],
        "sort": sort,
        "week_from": first,
        "now": now,
    }
    return render(request, "people.html", context)


async def _host_context(page: Page, db: SessionDep, row: Host) -> dict[str, Any]:
    host = await fleet_views.view_of(db, page.ctx, row)
    return {"page": page, "host": host, "view": host_cards(host), "now": datetime.now(UTC)}


# Declared before /hosts/{host_id}, which would otherwise take "….json" as an id.
@router.get("/hosts/{host_id}.json")
async def host_json(request: Request, host_id: str, page: PageDep, db: SessionDep) -> Response:
    row = await hosts.get_host_row(db, page.ctx.workspace_id, host_id)
    context = await _host_context(page, db, row)
    view = context["view"]
    body = {
        "generatedAt": context["now"].isoformat(),
        "host": context["host"].model_dump(mode="json", exclude={"gpus"}),
        "gpus": [c.as_json() | {"memoryPct": c.memory_pct} for c in view.cards],
        "fragments": _fragments(
            {
                "summary": "_host_summary.html",
                "gpus": "_host_gpus.html",
                "processes": "_host_processes.html",
                "problems": "_host_problems.html",
            },
            context,
        ),
    }
    return finish(request, JSONResponse(body))


@router.get("/hosts/{host_id}")
async def host_page(
    request: Request,
    host_id: str,
    page: PageDep,
    db: SessionDep,
    chart: Annotated[str, Query(alias="range", max_length=8)] = DEFAULT_RANGE,
) -> Response:
    """The host now, its live chart, and its history over ?range= (6h, 24h, 7d, 30d)."""
    row = await hosts.get_host_row(db, page.ctx.workspace_id, host_id)
    context = await _host_context(page, db, row)
    context.update(
        await host_history(
            db,
            page.ctx.workspace_id,
            page.ctx.workspace.timezone,
            row.id,
            chart,
            [c.index for c in context["view"].cards],
        )
    )
    css = context["series_css"]
    context["live_gpus"] = [
        {"uuid": c.uuid, "label": f"GPU {c.index}", "css": css.get(f"GPU {c.index}", "")}
        for c in context["view"].cards
    ]
    # The canonical id: the URL's spelling (upper case, braces) matched no GPU's host id.
    context["host_timeline"] = await host_timeline(
        db, page.ctx.workspace_id, page.ctx.workspace.timezone, str(row.public_id)
    )
    context.update(nav="fleet", refresh_seconds=REFRESH_SECONDS)
    return render(request, "host.html", context)


@router.get("/hosts/{host_id}/stream")
async def host_stream(
    request: Request, host_id: str, page: MemberPageDep, db: SessionDep, runtime: RuntimeDep
) -> Response:
    """The host's live utilization (agents 1.6+ stream it) as Server-Sent Events.

    Members and admins only, as the REST stream: live graphs are not finance's."""
    host = await hosts.get_host_row(db, page.ctx.workspace_id, host_id)
    # A page may listen for hours: the request's session ends (and gives its database
    # connection back) once this returns, before the first event is sent.
    allowed = _page_still_allowed(page, runtime)
    response = sse_response(runtime.stream, page.ctx.workspace_id, str(host.public_id), allowed)
    return finish(request, response)


@router.get("/fleet/stream")
async def fleet_stream(request: Request, page: MemberPageDep, runtime: RuntimeDep) -> Response:
    """The fleet's live frames (board/stream/frames.py) for the fleet page's live view.

    Members and admins only, as every live stream."""
    response = fleet_sse_response(
        runtime.stream, page.ctx.workspace_id, _page_still_allowed(page, runtime)
    )
    return finish(request, response)


def _page_still_allowed(page: Page, runtime: Runtime) -> StillAllowed:
    secret = page.person.session.secret
    assert secret is not None  # a signed-in page has a session secret
    return partial(
        _stream_still_allowed,
        runtime,
        secret,
        page.person.user_id,
        page.slug,
        page.ctx.client_address,
    )


async def _stream_still_allowed(
    runtime: Runtime, secret: str, user_id: int, slug: str, address: str
) -> bool:
    """The stream's viewer is still signed in (same session) and still a member or admin
    of the workspace: the checks of the request that opened it, made again."""
    async with runtime.sessions() as db:
        found = await web_sessions.find(db, secret)
        if found is None or found.user_id != user_id:
            return False
        try:
            ctx = await member_context(db, slug, user_id, address)
        except DomainError:
            return False
        return ctx.role in ("admin", "member")
