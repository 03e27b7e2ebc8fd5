"""The import structure of `board/`, computed from the source: layers, one way, no cycle.

kit (db, errors, settings, httpserver, edge, jsonbodies, logs, metrics, readmodels, zones,
     apidocs)
  <  domains (auth, hosts, observations, ingest, rollups, …)
  <  runtime (the composition root), maintenance (the schedule)  <  web (pages)
  <  app, cli, demo, metadata (entry points)

A module may import from its own layer's other packages only if that adds no cycle, and
from the layers below it, never above. Only module-level imports count; an import inside
a function (the CLI's lazy imports) is still an import, and is counted too.

SQL counts like an import: each table belongs to the one package that declares it, and
a package may name in SQL (FROM, JOIN, UPDATE, INTO, …) only its own tables and those of
packages it may import, i.e. naming one adds an edge that must run down the layers and
close no cycle. The kit declares and names no table.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

BOARD = Path(__file__).resolve().parents[1] / "board"

KIT = {
    "db",
    "errors",
    "settings",
    "httpserver",
    "edge",
    "jsonbodies",
    "logs",
    "metrics",
    "readmodels",
    "zones",
    "apidocs",
    "reportkit",
}
ENTRY = {"app", "cli", "demo", "demo_history", "demo_hosts", "demo_story", "metadata"}
# runtime builds the domains' parts; maintenance schedules partitions and rollups.
LAYER_OF_SPECIAL = {"runtime": 2, "maintenance": 2, "web": 3}


def layer(node: str) -> int:
    if node in KIT:
        return 0
    if node in ENTRY:
        return 4
    return LAYER_OF_SPECIAL.get(node, 1)


def node_of(path: Path, root: Path = BOARD) -> str:
    """A package below board/ (its folder), or a module at its top (its name)."""
    relative = path.relative_to(root)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def imports() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> where, for every import of one board node by another."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(BOARD.rglob("*.py")):
        source = node_of(path)
        if source == "__init__":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
                if node.module == "board":
                    names = [f"board.{alias.name}" for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] != "board" or len(parts) < 2:
                    continue
                target = parts[1]
                if target != source:
                    found[(source, target)].append(
                        f"{path.relative_to(BOARD.parent)}:{node.lineno}"
                    )
    return found


def owned_tables(root: Path = BOARD) -> dict[str, str]:
    """Table (or view, function, type) name -> the board node that declares it: an ORM
    model's `__tablename__`, a Core `Table("name", …)`, or a module's `OWNED_RELATIONS`
    (what a migration makes outside the metadata)."""
    owner: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        node_name = node_of(path, root)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name) and target.id == "__tablename__":
                    names = [ast.literal_eval(node.value)]
                elif isinstance(target, ast.Name) and target.id == "OWNED_RELATIONS":
                    names = list(ast.literal_eval(node.value))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "Table"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names = [node.args[0].value]
            for name in names:
                assert name not in owner, f"{name} is declared by {owner[name]} and {node_name}"
                owner[name] = node_name
    return owner


_SQL_NAME = re.compile(
    r"\b(?:FROM|JOIN|UPDATE|INTO|TABLE|TRUNCATE|ONLY|REFERENCES)\s+([a-z_][a-z0-9_]*)"
    r"|\b([a-z_][a-z0-9_]*)\s*\("
)


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def sql_references(root: Path = BOARD) -> dict[tuple[str, str], list[str]]:
    """(naming node, owning node) -> where, for every table another node's SQL names
    (a function or view of OWNED_RELATIONS also when called: `raw_observations(…)`)."""
    owner = owned_tables(root)
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        source = node_of(path, root)
        tree = ast.parse(path.read_text(), str(path))
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if id(node) in prose:
                continue
            for match in _SQL_NAME.finditer(node.value):
                table = match.group(1) or match.group(2)
                if table in owner and owner[table] != source:
                    found[(source, owner[table])].append(
                        f"{path.relative_to(root.parent)}:{node.lineno} {table}"
                    )
    return found


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_board_packages() -> None:
    found = imports()
    loops = cycles(set(found))
    detail = [
        f"{a} -> {b}: {', '.join(found[(a, b)][:3])}"
        for loop in loops
        for (a, b) in sorted(found)
        if a in loop and b in loop
    ]
    assert not loops, f"import cycles {loops}:\n" + "\n".join(detail)


def test_imports_run_down_the_layers() -> None:
    upward = [
        f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)}): {', '.join(where[:3])}"
        for (a, b), where in sorted(imports().items())
        if layer(b) > layer(a)
    ]
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


def test_the_kit_declares_and_names_no_table() -> None:
    owner = owned_tables()
    declared = sorted(f"{table} ({node})" for table, node in owner.items() if node in KIT)
    named = [
        f"{a} names {b}'s tables: {', '.join(where[:3])}"
        for (a, b), where in sorted(sql_references().items())
        if a in KIT
    ]
    assert not declared, f"tables declared in the kit: {declared}"
    assert not named, "\n".join(named)


def test_sql_names_only_tables_of_packages_it_may_import() -> None:
    """A table named in SQL is an edge to its owner: down the layers, and no cycle with
    the imports. The owner publishes a function (or a view) for everyone else."""
    named = sql_references()
    edges = set(imports()) | set(named)
    upward = [
        f"{a} (layer {layer(a)}) names {b}'s tables (layer {layer(b)}): {', '.join(w[:3])}"
        for (a, b), w in sorted(named.items())
        if layer(b) > layer(a)
    ]
    looped = [
        f"{a} names {b}'s tables, and {b} reaches {a}: {', '.join(named[(a, b)][:3])}"
        for loop in cycles(edges)
        for (a, b) in sorted(named)
        if a in loop and b in loop
    ]
    assert not upward, "\n".join(upward)
    assert not looped, "\n".join(looped)


def test_the_sql_scan_finds_a_planted_reference(tmp_path: Path) -> None:
    """The scan itself: a table named in another package's SQL, in a plain string and an
    f-string, is found; a docstring mentioning it is not; its own package is free."""
    root = tmp_path / "board"
    (root / "things").mkdir(parents=True)
    (root / "reader").mkdir()
    (root / "things" / "models.py").write_text(
        '__tablename__ = "things"\nOWNED_RELATIONS = ("thing_view",)\nQ = "SELECT 1 FROM things"\n'
    )
    (root / "reader" / "service.py").write_text(
        '"""Reads FROM things, in prose."""\n'
        'A = "SELECT * FROM things JOIN other ON true"\n'
        'def f(x):\n    return f"SELECT {x} FROM thing_view(1)"\n'
    )
    found = sql_references(root)
    assert set(found) == {("reader", "things")}
    assert [w.split()[-1] for w in found[("reader", "things")]] == ["things", "thing_view"]


def test_a_route_module_never_imports_another() -> None:
    offenders = []
    for path in sorted(BOARD.rglob("*routes.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("routes"):
                offenders.append(f"{path.relative_to(BOARD.parent)} imports {node.module}")
    assert not offenders, "\n".join(offenders)


def test_no_route_returns_an_untyped_dict() -> None:
    """Every JSON route declares what it returns (a read model, or a Response it builds)."""
    import typing

    from fastapi.routing import APIRoute

    from board.app import create_app
    from board.settings import Settings

    app = create_app(Settings(database_url="postgresql://unused@127.0.0.1/unused"))
    untyped = []
    for route in app.routes:
        if not isinstance(route, APIRoute):
            continue
        hints = typing.get_type_hints(route.endpoint)
        returned = hints.get("return")
        if typing.get_origin(returned) is dict or returned is dict:
            untyped.append(f"{sorted(route.methods)} {route.path} -> {returned}")
    assert not untyped, "routes returning plain dicts:\n" + "\n".join(untyped)


def test_the_architecture_doc_lists_each_package_with_its_tables() -> None:
    """docs/architecture.md's module table: every domain package, each table in its
    owner's row (the doc describes the code as it is)."""
    doc = (BOARD.parent / "docs" / "architecture.md").read_text()
    rows = {
        match.group(1): match.group(0)
        for match in re.finditer(r"^\| `board/([a-z_]+)[^`]*`[^|]*\|.*$", doc, re.MULTILINE)
    }
    packages = {p.name for p in BOARD.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    missing = sorted(packages - set(rows))
    assert not missing, f"packages missing from docs/architecture.md: {missing}"
    misplaced = sorted(
        f"{table} ({owner})"
        for table, owner in owned_tables().items()
        if owner in rows and f"`{table}`" not in rows[owner]
    )
    assert not misplaced, f"tables not listed in their package's row: {misplaced}"
