"""The house rules, checked: no import cycles, layers one way (import-linter, in ``make lint``), small
modules, thin click commands."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent / "hsdiff"
#: Lines of a module as ``ruff format`` writes it (one argument per line where a call is long).
MAX_MODULE_LINES = 650
#: The engine profile is a table of rows, each with its source: data, not logic, allowed longer.
TABLE_MODULES = {"rules/profile.py": 1100}
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
    long = {
        rel: n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > TABLE_MODULES.get(rel := str(p.relative_to(ROOT)), MAX_MODULE_LINES)
    }
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


#: Where engine names may be compared: the profile table itself and the CLI's choice lists.
ENGINE_NAMES_ALLOWED_IN = (
    "rules/profile.py",
    "rules/dflash.py",
    "rules/kinds.py",
    "rules/versions.py",
    "rules/words.py",
    "rules/traces.py",
    "cli/",
)


def _engine_comparisons(path: Path, names: set[str], root: Path = ROOT) -> list[str]:
    """``x == "vllm"``, ``key in ("sglang", "vllm")``, ``ENGINES = ("sglang", "vllm")``... in ``path``; a
    comparison of a file-format name (``fmt``, ``format``: a format's key is the same string as the engine that
    writes it) is not one."""
    tree = ast.parse(path.read_text(), filename=str(path))
    compared = {id(c) for node in ast.walk(tree) if isinstance(node, ast.Compare) for c in node.comparators}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in compared:  # kept for a later `in`
            named = [e for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
            if len(named) > 1:
                out.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
        if not isinstance(node, ast.Compare):
            continue
        left = ast.unparse(node.left)
        if "fmt" in left or "format" in left:
            continue
        for right in node.comparators:
            items = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right]
            consts = {e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if consts & names or (isinstance(node.left, ast.Constant) and node.left.value in names):
                out.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_engine_knowledge_lives_in_the_profile_table() -> None:
    """Outside the table (``rules/profile.py`` and its DFlash rows) and the CLI, no module compares against an
    engine's name: it asks the engine's profile (``conventions.rule(engine).<field>``) instead."""
    from hsdiff.rules.profile import ENGINE_INFO

    names = set(ENGINE_INFO) | {"sglang", "vllm", "trtllm", "modelopt", "specforge", "speculators"}
    found = [
        hit
        for p in sorted(ROOT.rglob("*.py"))
        if not str(p.relative_to(ROOT)).startswith(ENGINE_NAMES_ALLOWED_IN)
        for hit in _engine_comparisons(p, names)
    ]
    assert found == []


def test_engine_comparison_scan_finds_what_it_should(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        'def f(engine, key, fmt):\n    a = engine == "vllm"\n    b = key in ("sglang", "specforge")\n'
        '    c = fmt == "specforge"\n    """>>> f("sglang", "vllm", "x") == "vllm"\n    """\n'
        '    d = {"sglang": 1}\n    return a, b, c, d\n\nFAMILY_ENGINES = ("sglang", "vllm")\n'
    )
    hits = _engine_comparisons(probe, {"sglang", "vllm", "specforge"}, tmp_path)
    assert sorted(h.split(": ", 1)[1] for h in hits) == [
        "('sglang', 'vllm')",
        "engine == 'vllm'",
        "key in ('sglang', 'specforge')",
    ]
