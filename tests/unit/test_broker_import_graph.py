"""The broker's modules import one another without a circle, type-only imports included (issue 38
item 7; ../shared/reviews/architecture-2026-11-26.md §1).

At run time the imports have always formed a DAG; the circle was in the ``if TYPE_CHECKING``
imports (one strongly connected component of 51 modules), which readers and mypy follow. Only
cycles inside one package are allowed: a class and its helpers typed against their owner (the
controller package).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "broker" / "headwater" / "broker"
PREFIX = "headwater.broker"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([PREFIX, *parts])


PACKAGES = {_module_name(p.parent / "__init__.py") for p in ROOT.rglob("__init__.py")}


def package_of(module: str) -> str:
    return module if module in PACKAGES else module.rsplit(".", 1)[0]


def import_graph() -> dict[str, set[str]]:
    """module -> the broker modules it imports (module level, function level and TYPE_CHECKING)."""
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    base = ".".join(pkg + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                # importing a.b.c also runs a/__init__ and a/b/__init__
                parts = t.split(".")
                for i in range(2, len(parts) + 1):
                    name = ".".join(parts[:i])
                    if name in files and name != module:
                        graph[module].add(name)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_across_the_broker() -> None:
    crossing = []
    for scc in strongly_connected(import_graph()):
        packages = {package_of(m) for m in scc}
        if len(packages) > 1:
            crossing.append(scc)
    assert crossing == [], f"import circles across broker packages (type-only imports count): {crossing}"
