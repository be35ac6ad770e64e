"""The house rules, checked: no import cycles, layers one way (import-linter, in ``make lint``), small
modules, thin click commands."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent / "hsdiff"
MAX_MODULE_LINES = 520
MAX_COMMAND_LINES = 32


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return out


def test_no_import_cycles() -> None:
    graph = grimp.build_graph("hsdiff", exclude_type_checking_imports=True)
    assert _cycles(graph) == []


def test_no_module_is_too_long() -> None:
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_click_commands_are_thin() -> None:
    fat = {}
    for p in (ROOT / "cli").glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "command" for d in node.decorator_list
            ):
                body = node.body[1:] if ast.get_docstring(node) else node.body
                n = body[-1].end_lineno - body[0].lineno + 1  # type: ignore[operator]
                if n > MAX_COMMAND_LINES:
                    fat[f"{p.name}:{node.name}"] = n
    assert fat == {}
