"""The web board: server-rendered pages over the same services as the REST API."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from board.web import (
    account_routes,
    admin_routes,
    audit_routes,
    auth_routes,
    budget_routes,
    capacity_routes,
    directory_routes,
    energy_prices_routes,
    fleet_routes,
    job_page_routes,
    jobs_report_routes,
    money_routes,
    notices_routes,
    reservation_routes,
    sso_routes,
    usage_routes,
)
from board.web.render import STATIC


def install_web(app: FastAPI) -> None:
    """The page routers and the static files (shipped in the package: no CDN)."""
    app.include_router(auth_routes.router)
    app.include_router(sso_routes.router)
    app.include_router(account_routes.router)
    app.include_router(fleet_routes.router)
    app.include_router(capacity_routes.router)
    app.include_router(usage_routes.router)
    app.include_router(jobs_report_routes.router)
    app.include_router(admin_routes.router)
    app.include_router(audit_routes.router)
    app.include_router(notices_routes.router)
    app.include_router(notices_routes.snooze_router)
    app.include_router(reservation_routes.router)
    app.include_router(directory_routes.router)
    app.include_router(money_routes.router)
    app.include_router(energy_prices_routes.router)
    app.include_router(budget_routes.router)
    app.include_router(job_page_routes.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
