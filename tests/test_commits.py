"""One place ends a transaction: no route, service or worker of `board/` commits or rolls back.

The request's session (`board/db/engine.py: session_scope`, behind `SessionDep`)
commits once the route returns, or rolls back; a form's refused change is undone in its
savepoint (`board/web/forms.py` through `engine.savepoint`), and what must follow the
commit is asked with `engine.after_commit`. Computed from the source, as the layer test.
"""

from __future__ import annotations

import ast
import contextlib
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import text

from board.db.engine import after_commit, make_engine, make_sessionmaker, savepoint, session_scope

BOARD = Path(__file__).resolve().parents[1] / "board"

# Where a transaction may end, and why.
ALLOWED = {
    # The unit of work itself: the request's (and the commands') session, savepoints.
    "db/engine.py",
    # The ingest writer's batch owns its transaction on a raw psycopg connection: one
    # round trip carries the writes and the COMMIT (group commit, docs/architecture.md).
    "ingest/store.py",
}
ENDS = {"commit", "rollback"}


def transaction_ends(root: Path = BOARD) -> list[str]:
    """`file:line .call()` of every `x.commit()` / `x.rollback()` outside ALLOWED."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ENDS
            ):
                found.append(f"{where}:{node.lineno} .{node.func.attr}()")
    return found


def test_only_the_unit_of_work_commits_or_rolls_back() -> None:
    assert transaction_ends() == [], (
        "A route, service or worker ends a transaction itself. Let the request's session "
        "commit (SessionDep); undo a refused form change with board.web.forms.submit (a "
        "savepoint); run what must follow the commit with board.db.engine.after_commit."
    )


def test_the_allowed_places_exist() -> None:
    """A renamed or removed module leaves no stale exception behind."""
    assert all((BOARD / place).is_file() for place in ALLOWED)


def test_the_walk_finds_a_commit_and_a_rollback(tmp_path: Path) -> None:
    """The check sees what it looks for, so its empty answer means something."""
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "pages.py").write_text(
        "async def save(db):\n    await db.commit()\n\n\n"
        "async def undo(db):\n    await db.rollback()\n"
    )
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "engine.py").write_text("async def end(s):\n    await s.commit()\n")
    assert transaction_ends(tmp_path) == ["web/pages.py:2 .commit()", "web/pages.py:6 .rollback()"]


async def test_after_commit_work_follows_the_commit_and_never_a_rollback(
    database_url: str,
) -> None:
    """The scope's promise, on a real database: work asked with after_commit runs once
    the COMMIT is durable (another connection sees the row), in the order asked; a
    rolled-back savepoint drops the work asked inside it, a failed scope drops all."""
    engine = make_engine(database_url, pool_size=2)
    maker = make_sessionmaker(engine)
    seen: list[str] = []

    async def names() -> list[str]:
        async with engine.connect() as other:
            found = await other.execute(text("SELECT name FROM commits_probe ORDER BY name"))
            return [name for (name,) in found]

    async def look(tag: str) -> None:
        seen.append(f"{tag}: {','.join(await names())}")

    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE commits_probe (name text)"))
        async with session_scope(maker) as session:
            await session.execute(text("INSERT INTO commits_probe VALUES ('kept')"))
            after_commit(session, partial(look, "first"))
            with contextlib.suppress(LookupError):
                async with savepoint(session):
                    await session.execute(text("INSERT INTO commits_probe VALUES ('undone')"))
                    after_commit(session, partial(look, "dropped"))
                    raise LookupError("refused")
            after_commit(session, lambda: seen.append("second"))
            assert seen == []  # nothing before the commit
        assert seen == ["first: kept", "second"]

        async def failing_request() -> None:
            async with session_scope(maker) as session:
                await session.execute(text("INSERT INTO commits_probe VALUES ('failed')"))
                after_commit(session, partial(look, "never"))
                raise RuntimeError("the route failed")

        with pytest.raises(RuntimeError):
            await failing_request()
        assert seen == ["first: kept", "second"]
        assert await names() == ["kept"]
    finally:
        await engine.dispose()
