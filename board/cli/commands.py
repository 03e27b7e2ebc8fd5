"""What each `gua-board` command does; database work goes through the services."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import logging.config
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from board.db import migrate as migrations
from board.db.engine import make_engine, make_sessionmaker, session_scope
from board.db.urls import resolve_database_url
from board.errors import DomainError
from board.logs import install_redaction
from board.settings import Settings

T = TypeVar("T")


class CommandError(Exception):
    pass


def _settings() -> Settings:
    try:
        return Settings()
    except Exception as exc:  # pydantic's message names the variable and the rule
        raise CommandError(f"invalid configuration: {exc}") from None


def _in_session(fn: Callable[[AsyncSession], Awaitable[T]]) -> T:
    url = resolve_database_url(_settings())

    async def run() -> T:
        engine = make_engine(url, pool_size=1)
        try:
            async with session_scope(make_sessionmaker(engine)) as session:
                return await fn(session)
        finally:
            await engine.dispose()

    try:
        return asyncio.run(run())
    except DomainError as exc:
        raise CommandError(exc.detail) from None


def migrate(_: argparse.Namespace) -> int:
    migrations.upgrade(resolve_database_url(_settings()))
    print("migrations applied")
    return 0


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from board.httpserver import raise_open_files_limit, uvicorn_options
    from board.logs import logging_config
    from board.metrics.exposition import multiprocess_dir

    settings = _settings()
    url = resolve_database_url(settings)  # also exported to the worker processes
    migrations.upgrade(url)
    settings.resolved_secret_key()  # created once here, not raced by workers
    # JSON lines (or text) with request ids, here and in every worker (uvicorn applies it).
    log_config = logging_config(settings.log_level, settings.log_format)
    logging.config.dictConfig(log_config)
    install_redaction()
    raise_open_files_limit()  # before the workers start: they inherit it
    # Several workers share /metrics through a directory made for this run only.
    with multiprocess_dir(args.workers):
        uvicorn.run(
            "board.app:create_served_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=settings.log_level,
            log_config=log_config,
            access_log=False,
            **uvicorn_options(settings),
        )
    return 0


def create_workspace(args: argparse.Namespace) -> int:
    from board.workspaces import service

    workspace = _in_session(lambda s: service.create_workspace(s, args.slug, args.name))
    print(f"workspace {workspace.slug} created")
    return 0


def _password_from_stdin() -> str:
    """One line of UTF-8 text from stdin; anything else is refused, never a traceback."""
    line = sys.stdin.buffer.readline()
    if line.endswith(b"\n"):
        line = line[:-1]
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        raise CommandError("the password on stdin must be UTF-8 text") from None


def create_user(args: argparse.Namespace) -> int:
    from board.workspaces import service

    password = _password_from_stdin() if args.password_stdin else None

    async def run(session: AsyncSession) -> service.NewMember:
        workspace = await service.get_workspace(session, args.workspace)
        return await service.add_member(session, workspace, args.email, args.role, password)

    member = _in_session(run)
    if args.json:
        print(
            json.dumps(
                {
                    "email": member.user.email,
                    "workspace": args.workspace,
                    "role": member.role,
                    "apiToken": member.api_token,
                }
            )
        )
    else:
        print(f"{member.user.email} is {member.role} of {args.workspace}")
        if member.existing_account and password is not None:
            print("(an existing account: its password was not changed; see set-password)")
        print(f"API token (shown once): {member.api_token}")
    return 0


def issue_token(args: argparse.Namespace) -> int:
    from board.enrollment import service as enrollment
    from board.enrollment.schemas import IssuedEnrollment
    from board.workspaces import service

    settings = _settings()

    async def run(session: AsyncSession) -> IssuedEnrollment:
        workspace = await service.get_workspace(session, args.workspace)
        return await enrollment.issue(
            session,
            workspace.id,
            display_name=args.display_name,
            # Only a missing option means the default: 0 is refused, as the API refuses it.
            expires_in_hours=(
                args.expires_in
                if args.expires_in is not None
                else settings.enrollment_token_ttl_hours
            ),
        )

    issued = _in_session(run)
    if args.json:
        print(
            json.dumps(
                {
                    "enrollmentToken": issued.token,
                    "tokenPrefix": issued.prefix,
                    "expiresAt": issued.expires_at.isoformat(),
                }
            )
        )
    else:
        print(f"enrollment token (shown once, expires {issued.expires_at.isoformat()}):")
        print(issued.token)
    return 0


def partitions(_: argparse.Namespace) -> int:
    import psycopg

    from board.db.urls import libpq_url
    from board.observations.compaction import CompactionResult, compact_closed_days
    from board.observations.maintenance import MaintenanceResult, run_maintenance

    settings = _settings()
    url = libpq_url(resolve_database_url(settings))

    async def run() -> tuple[MaintenanceResult, CompactionResult]:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            made = await run_maintenance(
                conn,
                retention_days=settings.raw_retention_days,
                ahead_days=settings.partitions_ahead_days,
            )
            return made, await compact_closed_days(conn)

    result, compacted = asyncio.run(run())
    print(f"partitions created: {len(result.created)}, dropped: {len(result.dropped)}")
    for name in result.dropped:
        print(f"  dropped {name}")
    print(
        f"compacted: {compacted.observations} observations of {len(compacted.days)} closed "
        f"days into {compacted.hours} host hours"
    )
    return 0


def rollups_rebuild(args: argparse.Namespace) -> int:
    from board.cli.rollups import rebuild_command

    return rebuild_command(args, _settings())


def demo(args: argparse.Namespace) -> int:
    from board.demo import run_demo

    return run_demo(args, _settings())


def remove_member(args: argparse.Namespace) -> int:
    from board.auth import web_sessions
    from board.workspaces import service

    async def run(session: AsyncSession) -> None:
        workspace = await service.get_workspace(session, args.workspace)
        user_id = await service.remove_member(session, workspace.id, args.email)
        if not await service.has_memberships(session, user_id):
            await web_sessions.end_all(session, user_id)

    _in_session(run)
    print(f"{args.email} removed from {args.workspace}; their API tokens there ended")
    return 0


def revoke_api_token(args: argparse.Namespace) -> int:
    from sqlalchemy import func, update

    from board.auth import routing
    from board.auth.models import ApiToken
    from board.workspaces import service

    async def run(session: AsyncSession) -> int:
        workspace = await service.get_workspace(session, args.workspace)
        revoked = list(
            await session.scalars(
                update(ApiToken)
                .where(
                    ApiToken.workspace_id == workspace.id,
                    ApiToken.token_prefix == args.token_prefix,
                    ApiToken.revoked_at.is_(None),
                )
                .values(revoked_at=func.now())
                .returning(ApiToken.token_hash)
            )
        )
        await routing.session_drop(session, routing.API_TOKEN, revoked, workspace.id)
        return len(revoked)

    if _in_session(run) == 0:
        raise CommandError(f"no live API token {args.token_prefix} in {args.workspace}")
    print(f"API token {args.token_prefix} revoked")
    return 0


def _user_id(session: AsyncSession, email: str) -> Awaitable[int | None]:
    from sqlalchemy import select

    from board.auth.models import User

    return session.scalar(select(User.id).where(User.email == email.strip().lower()))


def sign_out(args: argparse.Namespace) -> int:
    from board.auth import web_sessions

    async def run(session: AsyncSession) -> int:
        user_id = await _user_id(session, args.email)
        if user_id is None:
            raise CommandError(f"no account {args.email}")
        return await web_sessions.end_all(session, user_id)

    print(f"{_in_session(run)} session(s) of {args.email} ended")
    return 0


def set_password(args: argparse.Namespace) -> int:
    """For the operator (who holds the database anyway): a person locked out gets a new one."""
    from board.auth import web_sessions
    from board.auth.passwords import hash_password
    from board.workspaces import service

    password = _password_from_stdin()
    if not 8 <= len(password) <= 1024:
        raise CommandError("a password must be 8 to 1024 characters")

    async def run(session: AsyncSession) -> None:
        user_id = await _user_id(session, args.email)
        if user_id is None:
            raise CommandError(f"no account {args.email}")
        await service.set_password(session, user_id, hash_password(password))
        await web_sessions.end_all(session, user_id)

    _in_session(run)
    print(f"password of {args.email} set; their sessions ended")
    return 0


def explain_database_error(exc: BaseException) -> str | None:
    """One line for the database errors a person can fix, instead of a traceback."""
    import psycopg

    seen: BaseException | None = exc
    while seen is not None:
        orig = getattr(seen, "orig", None)
        for candidate in (seen, orig):
            if isinstance(
                candidate, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn
            ):
                return (
                    "the database has no GUA Board tables (or older ones): "
                    "run `gua-board migrate` first"
                )
            if isinstance(candidate, psycopg.OperationalError):
                first = str(candidate).strip().splitlines()[0] if str(candidate).strip() else ""
                return f"cannot reach the database: {first}"
        seen = seen.__cause__ or seen.__context__
    return None


def now() -> datetime:
    return datetime.now(UTC)
