"""`gua-board demo`: the board on its embedded PostgreSQL, alive with simulated hosts.

Everything goes the way a real installation goes: migrations, a workspace with people,
hosts enrolled with one-time tokens claimed through the agent API, telemetry pushed
through the agent API by the agent's own fake collector and payload builder. Only the
hosts are simulated. A rerun reuses the workspace, the people (passwords reset to the
ones kept in the data directory) and the hosts (their agent tokens are kept there too).

The lab has a past that agrees with its present: four weeks of the same hosts
(board.demo_history), the host in error broken since the day before yesterday (so today
it has no GPUs on any page, and no billed hours), and teams, bookings, a price and a
notice channel (board.demo_story).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import secrets
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from pydantic import SecretStr
from sqlalchemy import select

from agent import AGENT_VERSION
from agent.fake import FAKE_GPU_NAME, FakeCollector
from board.app import create_app
from board.auth import tokens
from board.auth.models import Membership, User
from board.auth.passwords import hash_password
from board.db import migrate
from board.db.embedded import stop_embedded
from board.db.engine import session_scope
from board.db.urls import resolve_database_url
from board.demo_history import HISTORY, MAX_GAP_SECONDS
from board.demo_hosts import Demo, SimHost
from board.demo_story import TEAMS, MailSink, StoryHosts, write_story
from board.enrollment import service as enrollment
from board.errors import NotFound
from board.hosts.models import Host
from board.httpserver import uvicorn_options
from board.maintenance import maintain_once
from board.runtime import Runtime
from board.settings import Settings
from board.workspaces import service as workspaces

log = logging.getLogger(__name__)

SLUG = "demo"
SINCE_EVER = "2000-01-01T00:00:00Z"
PEOPLE = (
    ("admin@demo.example", "admin"),
    ("lead@demo.example", "member"),
    ("finance@demo.example", "finance"),
    *((email, "member") for _, email, _ in TEAMS),
)
# What each simulated host does, in order; more hosts than roles repeat them.
ROLES = ("ok", "ok", "partial", "error", "stale", "never")
BACKFILL = HISTORY  # how far back the history goes (board.demo_history)
# An erroring host broke this long before the demo's first run (kept in demo.json): more
# than a day, so "today" never holds any of its GPUs, on any page, in any time zone.
BROKEN_FOR = timedelta(hours=36)


def _state_path(settings: Settings) -> Path:
    return settings.data_dir / "demo.json"


def _load_state(settings: Settings) -> dict[str, Any]:
    path = _state_path(settings)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_state(settings: Settings, state: dict[str, Any]) -> None:
    path = _state_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.chmod(0o600)  # agent tokens and the demo password
    tmp.replace(path)


async def _ensure_people(runtime: Runtime, password: str) -> None:
    async with session_scope(runtime.sessions) as session:
        try:
            workspace = await workspaces.get_workspace(session, SLUG)
        except NotFound:
            workspace = await workspaces.create_workspace(session, SLUG, "Demo lab")
        for email, role in PEOPLE:
            user = await session.scalar(select(User).where(User.email == email))
            member = (
                await session.get(Membership, (workspace.id, user.id)) if user is not None else None
            )
            if user is None or member is None or member.role != role:
                await workspaces.add_member(session, workspace, email, role, password)
            else:
                user.password_hash = hash_password(password)  # reset: reuse, never guess
        if workspace.max_sample_gap_seconds != MAX_GAP_SECONDS:
            # The history's 15-minute steps are observed time, from the beginning on.
            gap = {"maxSampleGapSeconds": MAX_GAP_SECONDS, "maxSampleGapFrom": SINCE_EVER}
            await workspaces.update_settings(session, workspace, workspaces.parse_settings(gap))


async def _last_seen(runtime: Runtime, host: SimHost) -> datetime | None:
    async with runtime.sessions() as session:
        workspace = await workspaces.get_workspace(session, SLUG)
        seen: datetime | None = await session.scalar(
            select(Host.latest_observed_at).where(
                Host.workspace_id == workspace.id, Host.public_id == uuid.UUID(host.host_id)
            )
        )
    return seen


async def _tell_story(
    runtime: Runtime, settings: Settings, demo: Demo, history_start: datetime
) -> None:
    """Teams, bookings, a price and a notice channel (board.demo_story), once."""
    carded = [h for h in demo.hosts if h.role in ("ok", "partial")]
    if not carded:
        return
    story = StoryHosts(carded[0].host_id, carded[-1].host_id, FAKE_GPU_NAME)
    async with session_scope(runtime.sessions) as session:
        workspace = await workspaces.get_workspace(session, SLUG)
        await write_story(session, workspace, PEOPLE[0][0], story, history_start, settings)


async def _enroll(runtime: Runtime, client: httpx.AsyncClient, host: SimHost) -> None:
    async with session_scope(runtime.sessions) as session:
        workspace = await workspaces.get_workspace(session, SLUG)
        issued = await enrollment.issue(
            session, workspace.id, display_name=host.name, expires_in_hours=1
        )
    claimed = await client.post(
        "/agent/v1/enrollments/claim",
        json={
            "enrollmentToken": issued.token,
            "hostname": host.name,
            "agentVersion": AGENT_VERSION,
            "driverVersion": FakeCollector.driver_version,
        },
    )
    claimed.raise_for_status()
    body = claimed.json()
    host.host_id, host.agent_token = body["hostId"], body["agentToken"]


async def _still_enrolled(runtime: Runtime, host: SimHost) -> bool:
    """The kept agent token still belongs to a live host of the demo workspace.

    Checked in the database, not by pushing: a push would make a stale host fresh.
    """
    if not host.agent_token or not host.host_id:
        return False
    try:
        public_id = uuid.UUID(host.host_id)
    except ValueError:
        return False
    async with runtime.sessions() as session:
        workspace = await workspaces.get_workspace(session, SLUG)
        found = await session.scalar(
            select(Host.id).where(
                Host.workspace_id == workspace.id,
                Host.public_id == public_id,
                Host.agent_token_hash == tokens.digest(host.agent_token),
                Host.revoked_at.is_(None),
            )
        )
    return found is not None


async def start_demo(
    app_runtime: Runtime,
    settings: Settings,
    base_url: str,
    n_hosts: int,
    interval: float,
    client: httpx.AsyncClient | None = None,
    history: timedelta = BACKFILL,
    story: bool = True,
) -> Demo:
    """Workspace, people and enrolled hosts on a running board; the first pushes done,
    and the story told (the history is written by Demo.backfill, in the background)."""
    now = datetime.now(UTC)
    await maintain_once(app_runtime)  # partitions for the back-filled hours, before pushing
    state = _load_state(settings)
    broken_since = _instant(state.get("brokenSince")) or (now - BROKEN_FOR).replace(
        second=0, microsecond=0
    )
    password = state.get("password") or secrets.token_urlsafe(12)
    await _ensure_people(app_runtime, password)
    client = client or httpx.AsyncClient(base_url=base_url, timeout=30)
    kept = state.get("hosts", {})
    hosts: list[SimHost] = []
    for i in range(n_hosts):
        role = ROLES[i % len(ROLES)]
        host = SimHost(name=f"demo-{role}-{i + 1:02d}", role=role)
        if role == "error":
            host.broken_since = broken_since
        saved = kept.get(host.name, {})
        host.host_id, host.agent_token = saved.get("hostId", ""), saved.get("agentToken", "")
        if not await _still_enrolled(app_runtime, host):
            await _enroll(app_runtime, client, host)
        host.seen_until = await _last_seen(app_runtime, host)
        hosts.append(host)
    _save_state(
        settings,
        {
            "password": password,
            "brokenSince": broken_since.isoformat(),
            "hosts": {h.name: {"hostId": h.host_id, "agentToken": h.agent_token} for h in hosts},
        },
    )
    demo = Demo(base_url, SLUG, password, hosts, interval, client, app_runtime, now)
    await demo.tick(now)
    for host in hosts:
        # A stale host's last word first, so it shows stale (not never) from the start.
        if host.role == "stale":
            last = host.history_end(now)
            assert last is not None
            await demo.push(host, last.replace(second=0, microsecond=0))
    if story:
        await _tell_story(app_runtime, settings, demo, now - history)
    return demo


def _instant(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


def _banner(demo: Demo) -> str:
    width = max(len(e) for e, _ in PEOPLE)
    people = "\n".join(f"    {e:<{width}}  {role}" for e, role in PEOPLE)
    roles = ", ".join(f"{h.name} ({h.role})" for h in demo.hosts)
    mail = (
        f"  Notices are mailed to the demo's own mail sink ({demo.mail.url}), which keeps "
        "nothing.\n"
        if demo.mail is not None
        else ""
    )
    return (
        f"\nGUA Board demo is running at {demo.url}/\n\n"
        f"  Sign in with password {demo.password} as:\n{people}\n\n"
        f"  Simulated hosts, pushing every {demo.interval:g} s: {roles}\n"
        "  Their past four weeks are being written for the charts and the reports.\n"
        f"{mail}"
        "  Press Ctrl-C to stop.\n"
    )


async def serve_demo(
    settings: Settings,
    host: str,
    port: int,
    n_hosts: int,
    interval: float,
    on_ready: Callable[[Demo], Awaitable[None] | None] | None = None,
    backfill: timedelta = BACKFILL,
    story: bool = True,
) -> None:
    """Run the board (uvicorn, in this process) and the simulated hosts until stopped."""
    mail = None
    if settings.smtp_url is None:
        # Notices have somewhere to go, and nothing leaves the machine (demo_story).
        mail = await MailSink().start()
        settings = settings.model_copy(update={"smtp_url": SecretStr(mail.url)})
    app = create_app(settings)
    # Open live streams (SSE) never finish on their own: give them 2 s on shutdown.
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
        **uvicorn_options(settings),
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            await serving  # start-up failed (port taken, database down): say why
            return
        await asyncio.sleep(0.05)
    bound = server.servers[0].sockets[0].getsockname()[1]
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    url = f"http://{shown_host}:{bound}"
    tasks: list[asyncio.Task[None]] = []
    demo: Demo | None = None
    try:
        demo = await start_demo(
            app.state.runtime, settings, url, n_hosts, interval, history=backfill, story=story
        )
        demo.mail = mail
        tasks = [asyncio.create_task(demo.simulate()), asyncio.create_task(demo.backfill(backfill))]
        tasks += [asyncio.create_task(demo.stream(h)) for h in demo.hosts if h.streams()]
        if on_ready is not None:
            result = on_ready(demo)
            if result is not None:
                await result
        # Shielded: cancelling the demo must stop the server gracefully (below), not
        # cancel it mid-shutdown.
        await asyncio.shield(serving)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if demo is not None:
            await demo.client.aclose()
        server.should_exit = True
        await asyncio.gather(serving, return_exceptions=True)
        if mail is not None:
            await mail.stop()


def run_demo(args: argparse.Namespace, settings: Settings) -> int:
    logging.basicConfig(level=logging.WARNING)
    url = resolve_database_url(settings)  # the embedded PostgreSQL when none is configured
    migrate.upgrade(url)
    settings.resolved_secret_key()
    n_hosts = max(1, min(int(args.hosts), 50))
    interval = max(0.2, float(args.interval))

    def ready(demo: Demo) -> None:
        print(_banner(demo), flush=True)  # noqa: T201 - the demo's whole point is this line

    try:
        asyncio.run(serve_demo(settings, args.host, args.port, n_hosts, interval, ready))
    except KeyboardInterrupt:
        pass
    print(_goodbye(settings), flush=True)  # noqa: T201 - says what was stopped and what stays
    return 0


def _goodbye(settings: Settings) -> str:
    """Stop what the demo started (the embedded PostgreSQL, when it used one) and say so."""
    if settings.database_url:
        return "Demo stopped. Its workspace stays in the configured database."
    stopped = stop_embedded(settings.data_dir)
    where = settings.data_dir
    return (
        ("Demo stopped, and its embedded PostgreSQL too. " if stopped else "Demo stopped. ")
        + f"Its data (database, secret key, demo password) stays in {where}; "
        + f"`make demo` reuses it, and `rm -rf '{where}'` removes it."
    )
