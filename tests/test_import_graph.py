"""posenc's modules import each other one way: no cycle (issue 41)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "posenc"


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its ``__init__``)."""
    found = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its file (functions included), by the
    import statements' text: ``from .x import y`` counts ``x`` and, where ``y`` is a module, ``x.y``."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found |= {t for t in [target] + [f"{target}.{a.name}" for a in node.names] if t in known}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
    return found - {name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle's first appearance in a depth-first search (enough to say whether any exists)."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_finder_sees_a_planted_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_posenc_imports_one_that_imports_it_back():
    known = modules()
    assert "posenc.attention" in known and "posenc.rope.scaling" in known
    # the package's own __init__ files re-export their modules; a module importing ``posenc`` itself is a
    # notebook-style convenience that the re-exports would turn into a cycle, so the graph leaves packages out
    packages = {name for name, path in known.items() if path.name == "__init__.py"}
    graph = {name: imports(name, path, known) - packages for name, path in known.items() if name not in packages}
    assert "posenc.block_sparse" in graph["posenc.attention"]  # the finder reads function-level imports too
    assert cycles(graph) == []
