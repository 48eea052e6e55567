"""No import cycle inside python/waldio (issue 20): every package reads top-down.

The graph: one node per module of python/waldio (a package is its __init__), one
edge per import statement that names another waldio module, wherever the statement
is (module level, inside a function, under ``if TYPE_CHECKING``): an import put off
until a function runs still makes the two modules depend on each other, which is
what "reads top-down" rules out.  ``from P import name`` is an edge to the module
P.name when there is one, else to P.  Left out: a module's import of its own
ancestor package (``waldio.library`` reading ``waldio.__path__``), because Python
initializes every ancestor package before any module inside it runs, so that
import adds no order between them.

The test parses the source and imports nothing, so it also covers modules that
need root or a build to import.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "python"


def modules(root: Path) -> Dict[str, Path]:
    out = {}
    for path in sorted((root / "waldio").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: Dict[str, Path]) -> Set[str]:
    """The waldio modules that module ``name`` (at ``path``) imports anywhere."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for a in node.names:
                if f"{source}.{a.name}" in known:
                    out.add(f"{source}.{a.name}")
                elif source in known:
                    out.add(source)
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    return out - ancestors - {name}


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def import_graph(root: Path) -> Dict[str, Set[str]]:
    known = modules(root)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def test_the_checker_finds_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "waldio" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "waldio" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("from .b import g\n\ndef f():\n    return g()\n")
    (pkg / "b.py").write_text("def g():\n    from . import a  # on use\n    return a\n")
    (pkg / "c.py").write_text("import waldio\nfrom waldio import sub\n")   # ancestors: no edge
    graph = import_graph(tmp_path)
    assert graph["waldio.sub.a"] == {"waldio.sub.b"}
    assert graph["waldio.sub.c"] == set()
    assert cycles(graph) == [["waldio.sub.a", "waldio.sub.b"]]


def test_no_import_cycle_inside_python_waldio() -> None:
    graph = import_graph(PACKAGE_ROOT)
    assert len(graph) > 50 and "waldio.bench.runner" in graph
    found = cycles(graph)
    detail = ["; ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c) for c in found]
    assert found == [], detail
