"""The fleet page, a host's page, and the JSON they refresh themselves from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

from board.db.connection import report_connection
from board.db.deps import SessionDep
from board.hosts import service as hosts
from board.hosts.models import Host
from board.reports import service as reports
from board.reports.params import parse_window
from board.runtime import RuntimeDep
from board.stream.sse import sse_response
from board.web.charts import percent_chart
from board.web.deps import MemberPageDep, Page, PageDep
from board.web.fleet import CARD_STATES, Fleet, build_fleet, host_cards
from board.web.render import PageRoute, finish, render, templates

router = APIRouter(prefix="/w/{slug}", route_class=PageRoute, include_in_schema=False)

REFRESH_SECONDS = 5
CHART_HOURS = 24


def _filters(state: str, host: str) -> tuple[str, str]:
    return (state if state in CARD_STATES else ""), host.strip()


def _fragments(names: dict[str, str], context: dict[str, Any]) -> dict[str, str]:
    return {key: templates.get_template(name).render(context) for key, name in names.items()}


async def _fleet_context(
    page: Page, db: SessionDep, state: str, host: str
) -> tuple[dict[str, Any], Fleet]:
    state, host = _filters(state, host)
    all_hosts = await hosts.list_hosts(db, page.ctx)
    fleet = build_fleet(all_hosts, state, host)
    context = {
        "page": page,
        "fleet": fleet,
        "state": state,
        "host": host,
        "filtered": bool(state or host),
        "now": datetime.now(UTC),
        "host_options": all_hosts,
    }
    return context, fleet


@router.get("")
async def fleet_without_slash(request: Request, page: PageDep) -> Response:
    # Relative, unlike Starlette's slash redirect (which names the Host header); a
    # workspace that is not yours is 404 here as on every page.
    return RedirectResponse(f"/w/{page.slug}/", status_code=307)


@router.get("/")
async def fleet_page(
    request: Request, page: PageDep, db: SessionDep, state: str = "", host: str = ""
) -> Response:
    context, _ = await _fleet_context(page, db, state, host)
    context.update(nav="fleet", states=CARD_STATES, refresh_seconds=REFRESH_SECONDS)
    return render(request, "fleet.html", context)


@router.get("/fleet.json")
async def fleet_json(
    request: Request, page: PageDep, db: SessionDep, state: str = "", host: str = ""
) -> Response:
    context, fleet = await _fleet_context(page, db, state, host)
    body = {
        "generatedAt": context["now"].isoformat(),
        **fleet.as_json(),
        "fragments": _fragments(
            {"counts": "_fleet_counts.html", "hosts": "_fleet_hosts.html"}, context
        ),
    }
    return finish(request, JSONResponse(body))


async def _host_context(page: Page, db: SessionDep, row: Host) -> dict[str, Any]:
    host = await hosts.view_of(db, page.ctx, row)
    return {"page": page, "host": host, "view": host_cards(host), "now": datetime.now(UTC)}


async def _history(db: SessionDep, page: Page, host_key: int) -> dict[str, Any]:
    """Hourly utilization and memory of this host's GPUs, from the utilization report
    narrowed to the host (not the whole fleet's report, filtered)."""
    now = datetime.now(UTC)
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - timedelta(hours=CHART_HOURS)
    window = parse_window(start.isoformat(), end.isoformat(), page.ctx.workspace.timezone)
    report = await reports.utilization_report(
        await report_connection(db), page.ctx.workspace_id, window, "gpu", "hour", host_key
    )
    util: dict[str, list[tuple[datetime, float | None]]] = {}
    memory: dict[str, list[tuple[datetime, float | None]]] = {}
    for r in sorted(report.rows, key=lambda r: (r["gpuIndex"] or 0, r["bucketStart"])):
        label = f"GPU {r['gpuIndex']}"
        at = datetime.fromisoformat(r["bucketStart"])
        util.setdefault(label, []).append((at, r["avgUtilPct"]))
        memory.setdefault(label, []).append((at, r["avgMemoryUsedPct"]))
    local_start, local_end = window.local(window.start), window.local(window.end)
    return {
        "util_chart": percent_chart("Utilization", local_start, local_end, util),
        "memory_chart": percent_chart("Memory used", local_start, local_end, memory),
        "tz": window.tz_name,
    }


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
async def host_page(request: Request, host_id: str, page: PageDep, db: SessionDep) -> Response:
    row = await hosts.get_host_row(db, page.ctx.workspace_id, host_id)
    context = await _host_context(page, db, row)
    context.update(await _history(db, page, row.id))
    context.update(nav="fleet", refresh_seconds=REFRESH_SECONDS, chart_hours=CHART_HOURS)
    return render(request, "host.html", context)


@router.get("/hosts/{host_id}/stream")
async def host_stream(
    request: Request, host_id: str, page: MemberPageDep, db: SessionDep, runtime: RuntimeDep
) -> Response:
    """The host's live utilization (agents 1.6+ stream it) as Server-Sent Events.

    Members and admins only, as the REST stream: live graphs are not finance's."""
    host = await hosts.get_host_row(db, page.ctx.workspace_id, host_id)
    # A page may listen for hours: give the database connection back first.
    await db.commit()
    return finish(request, sse_response(runtime.stream, page.ctx.workspace_id, str(host.public_id)))
