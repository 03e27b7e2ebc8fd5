"""The import structure of `board/`, computed from the source: layers, one way, no cycle.

kit (db, auth, errors, settings, httpserver, edge, jsonbodies, logs, metrics)
  <  domains (hosts, ingest, …)
  <  runtime (the composition root), maintenance (the schedule)  <  web (pages)
  <  app, cli, demo, metadata (entry points)

A module may import from its own layer's other packages only if that adds no cycle, and
from the layers below it, never above. Only module-level imports count; an import inside
a function (the CLI's lazy imports) is still an import, and is counted too.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

BOARD = Path(__file__).resolve().parents[1] / "board"

KIT = {"db", "auth", "errors", "settings", "httpserver", "edge", "jsonbodies", "logs", "metrics"}
KIT |= {"reportkit", "zones"}
ENTRY = {"app", "cli", "demo", "demo_history", "demo_hosts", "demo_story", "metadata"}
# runtime builds the domains' parts; maintenance schedules partitions and rollups.
LAYER_OF_SPECIAL = {"runtime": 2, "maintenance": 2, "web": 3}


def layer(node: str) -> int:
    if node in KIT:
        return 0
    if node in ENTRY:
        return 4
    return LAYER_OF_SPECIAL.get(node, 1)


def node_of(path: Path) -> str:
    """A package below board/ (its folder), or a module at its top (its name)."""
    relative = path.relative_to(BOARD)
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
